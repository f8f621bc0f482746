// The CPU engine's inner loops over one row segment (at most kSegmentCols elements, converted to
// fp32 in a buffer that stays in L1). The same source is compiled once per x86-64 ISA level
// (baseline, AVX2, AVX-512) and the best one for the running CPU is chosen at start-up, so the
// vectorized loops need no machine-specific build.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/kernels/stats.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope::cpu {

inline constexpr int kSegmentCols = 4096;

// 4over6's candidates of a segment's blocks (four_over_six_candidates), a column per field so the
// loops over them vectorize: the cast multiplier, its inverse and the UE4M3 code's value of the
// map-to-4 and the map-to-6 candidate.
struct FourOverSixBlocks {
  static constexpr int kMaxBlocks = kSegmentCols / 16;
  float scale4[kMaxBlocks], inv4[kMaxBlocks], code4[kMaxBlocks];
  float scale6[kMaxBlocks], inv6[kMaxBlocks], code6[kMaxBlocks];
};

// residual_sums' three sums.
struct ResidualSums {
  double cross = 0, squares = 0, with_cast = 0;
};

struct SegmentKernels {
  const char* isa;  // a short name: "x86-64-v4", "x86-64-v3", "baseline"
  // out[i] = fp32(element first + i), i < n.
  void (*to_float)(const void* data, DType dtype, float scale_inv, std::int64_t first, int n, float* out);
  // Merges the moments of x[0..n) into *into.
  void (*add_moments)(const float* x, int n, TensorMoments* into);
  // out[b] = max |x| over block b of `block` elements, as TE computes it: Inf kept, NaN skipped.
  void (*block_amax)(const float* x, int n, int block, float* out);
  // acc[i] = max(acc[i], |x[i]|) for i < n, NaN skipped and Inf kept: a column per element.
  void (*fold_amax)(const float* x, int n, float* acc);
  // The largest magnitude bits (sign cleared) of n 16-bit floats whose Inf is inf_bits, NaN
  // skipped: they order as the magnitudes do, so a row's amax needs no conversion.
  std::uint16_t (*max_magnitude_bits16)(const std::uint16_t* codes, int n, std::uint16_t inf_bits);
  // acc[i] = max(acc[i], magnitude bits of codes[i]), NaN skipped: a column per element.
  void (*fold_magnitude_bits16)(const std::uint16_t* codes, int n, std::uint16_t inf_bits, std::uint16_t* acc);
  // scale[b], scale_inv[b] from amax[b], b < nb, by the block rule (scale_rules.h).
  void (*block_scales)(const BlockRule& rule, const float* amax, int nb, float* scale, float* scale_inv);
  // Quantizes x[0..n) with scale[i / block_cols] (block_cols 0: scale[0] for all), adding the
  // outcome to *into; block_cols is a multiple of 16, so a vector never straddles two blocks.
  void (*quantize)(CastFormat format, const float* x, int n, const float* scale, const float* scale_inv,
                   int block_cols, QuantStats* into);
  // The same under stochastic rounding: the expectation of every count and sum (stochastic_element).
  void (*quantize_expected)(CastFormat format, const float* x, int n, const float* scale, const float* scale_inv,
                            int block_cols, QuantStats* into);
  // What measuring quantize's (stochastic: quantize_expected's) cast of x[0..n) against x + residual
  // instead of x adds, over the finite x, with x̂ the cast (its expectation): into->cross +=
  // Σ d (x - x̂), into->squares += Σ d², into->with_cast += Σ d x̂, d = residual[i].
  void (*residual_sums)(CastFormat format, bool stochastic, const float* x, const float* residual, int n,
                        const float* scale, const float* scale_inv, int block_cols, ResidualSums* into);
  // NVFP4 4over6: the candidates of blocks with amax[b], b < nb (four_over_six_candidates).
  void (*four_over_six_blocks)(const BlockRule& rule, const float* amax, int nb, FourOverSixBlocks* into);
  // The error of each block of `block` elements (a multiple of 16) under its two candidates, TE's
  // sum in element order (four_over_six_error); entry b of each array is block b's.
  void (*four_over_six_errors)(const float* x, int n, int block, const FourOverSixBlocks& candidates,
                               float tensor_amax, float* error4, float* error6);
  // Each block's pick from its two errors (four_over_six_takes_map4): scale[b], scale_inv[b], b < nb.
  void (*four_over_six_picks)(const FourOverSixBlocks& candidates, const float* error4, const float* error6, int nb,
                              float* scale, float* scale_inv);
  // 4over6 in one-row blocks: scale[b], scale_inv[b] of the candidate with the smaller error, from
  // the blocks' amax[b] and elements.
  void (*four_over_six_scales)(const BlockRule& rule, const float* x, int n, int block, const float* amax, float* scale,
                               float* scale_inv);
};

// The compiled copies this CPU can run, best first.
std::vector<const SegmentKernels*> runnable_segment_kernels();

}  // namespace fp8scope::cpu
