// The GEMM check on the daemon's GPU with cuBLASLt: Y = X · Wᵀ in BF16 (fp32 accumulate, the
// reference) and in FP8 E4M3 with per-tensor current scales, with fast accumulation and without.
// Built with the CUDA engine; otherwise it reports that the build has none.
#pragma once

#include <memory>
#include <vector>

#include "fp8scope/kernels/gemm_check.h"

namespace fp8scope {

class GpuGemmCheck {
 public:
  virtual ~GpuGemmCheck() = default;
  // Two results: accumulate "fast" and "precise".
  virtual Result<std::vector<GemmCheckResult>> run(const TensorView& x, const TensorView& w) = 0;
};

Result<std::unique_ptr<GpuGemmCheck>> make_gpu_gemm_check(int device);

}  // namespace fp8scope
