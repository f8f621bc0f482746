// The CPU engine's inner loops over one row segment (at most kSegmentCols elements, converted to
// fp32 in a buffer that stays in L1). The same source is compiled once per x86-64 ISA level
// (baseline, AVX2, AVX-512) and the best one for the running CPU is chosen at start-up, so the
// vectorized loops need no machine-specific build.
#pragma once

#include <cstdint>

#include "fp8scope/dtype.h"
#include "fp8scope/fp8_format.h"
#include "fp8scope/stats.h"

namespace fp8scope::cpu {

inline constexpr int kSegmentCols = 4096;

struct SegmentKernels {
  const char* isa;
  // out[i] = fp32(element first + i), i < n.
  void (*to_float)(const void* data, DType dtype, float scale_inv, std::int64_t first, int n, float* out);
  // Merges the moments of x[0..n) into *into (the segment's own mean for its M2, then Chan).
  void (*add_moments)(const float* x, int n, TensorMoments* into);
  // out[b] = max |x| over block b of `block` elements, as TE computes it: Inf kept, NaN skipped.
  void (*block_amax)(const float* x, int n, int block, float* out);
  // Quantizes x[0..n) with one scale (per_element false: scale[0], scale_inv[0]) or one per element,
  // adding the outcome to *into; scale_min/max are the caller's.
  void (*quantize)(Fp8Format format, const float* x, int n, const float* scale, const float* scale_inv,
                   bool per_element, QuantStats* into);
};

// The kernels for the best ISA this CPU supports.
const SegmentKernels& best_segment_kernels();

}  // namespace fp8scope::cpu
