// What FP8 does to a forward GEMM's output: Y = X · Wᵀ computed from the high-precision operands
// (the reference) and from their E4M3 casts with per-tensor current scales, and the error between
// the two. The daemon runs it on sampled fprop pairs (X [M, K], W [N, K]): with cuBLASLt on its
// GPU (fast and precise accumulation), or here on the CPU as an fp32 emulation (labelled so).
#pragma once

#include <cstdint>
#include <string>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/host_device.h"
#include "fp8scope/kernels/stats_engine.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope {

struct GemmCheckResult {
  std::string accumulate;      // "fast" | "precise" (cuBLASLt) | "emulated" (CPU, fp32 accumulate)
  std::int64_t rows = 0;       // rows of X used (a prefix when the full GEMM exceeds the budget)
  std::int64_t m = 0, n = 0, k = 0;
  double mse = 0;              // mean (y8 - y)² over the output
  double cosine = 0;           // cosine similarity of y8 and y
  double max_rel_error = 0;    // max |y8 - y| / max |y|
  float scale_x = 1, scale_w = 1;
};

// Sums of an output comparison, mergeable across row blocks, CPU threads and CUDA blocks: the CPU
// emulation and the GPU check's error kernel add and merge through these same functions.
struct GemmErrorSums {
  double squared_error = 0, dot = 0, ref_squares = 0, test_squares = 0;
  double max_abs_error = 0, max_abs_ref = 0;
  std::int64_t count = 0;

  FP8SCOPE_HD void add(double reference, double test) {
    const double d = test - reference;
    squared_error += d * d;
    dot += reference * test;
    ref_squares += reference * reference;
    test_squares += test * test;
    const double abs_d = d < 0 ? -d : d, abs_ref = reference < 0 ? -reference : reference;
    max_abs_error = abs_d > max_abs_error ? abs_d : max_abs_error;
    max_abs_ref = abs_ref > max_abs_ref ? abs_ref : max_abs_ref;
    ++count;
  }
  FP8SCOPE_HD void merge(const GemmErrorSums& o) {
    squared_error += o.squared_error;
    dot += o.dot;
    ref_squares += o.ref_squares;
    test_squares += o.test_squares;
    max_abs_error = o.max_abs_error > max_abs_error ? o.max_abs_error : max_abs_error;
    max_abs_ref = o.max_abs_ref > max_abs_ref ? o.max_abs_ref : max_abs_ref;
    count += o.count;
  }
  void finish(GemmCheckResult* out) const;
};

// The CPU emulation: both GEMMs in fp32 with fp64 error sums. max_flops bounds the work: X is cut
// to its first rows so that rows * N * K <= max_flops.
Result<GemmCheckResult> gemm_check_cpu(const TensorView& x, const TensorView& w, CastFormat format,
                                       std::int64_t max_flops = std::int64_t{1} << 28);

}  // namespace fp8scope
