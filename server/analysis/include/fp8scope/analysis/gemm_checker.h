// The GEMM check of one forward GEMM's operand pair (gemm_pairing.h): its FP8 output against its
// high-precision output, on the GPU when one is given (each accumulation mode cuBLASLt offers),
// else emulated on the CPU (E4M3, fp32 accumulation). A value; publishing is the publisher's job.
#pragma once

#include <mutex>
#include <vector>

#include "fp8scope/kernels/gemm_check.h"
#include "fp8scope/kernels/gpu_gemm_check.h"
#include "fp8scope/analysis/gemm_pairing.h"

namespace fp8scope::server {

class GemmChecker {
 public:
  explicit GemmChecker(GpuGemmCheck* gpu) : gpu_(gpu) {}

  // Empty when the pair cannot be checked (shapes that do not multiply); the reason is logged.
  std::vector<GemmCheckResult> check(const GemmPair& pair);

 private:
  GpuGemmCheck* gpu_;  // null: the CPU emulation only
  std::mutex mu_;      // one check at a time: they are large
};

}  // namespace fp8scope::server
