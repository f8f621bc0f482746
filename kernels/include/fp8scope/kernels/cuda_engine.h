// The CUDA statistics engine: the same FP8 math (quantize_element.h, scale_rules.h) run as CUDA
// kernels on the daemon's own GPU, behind the StatsEngine interface. Built when nvcc is found
// (sm_89, sm_90); otherwise make_cuda_engine() says so.
#pragma once

#include <cstdint>
#include <memory>

#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

struct CudaEngineOptions {
  int device = 0;
  std::uint64_t memory_budget_bytes = 8ull << 30;  // device memory the engine may hold
};

// True when this build has the CUDA engine compiled in.
bool cuda_engine_built();

// An engine on the given device, or why there is none (no CUDA in this build, no driver, no
// device N).
Result<std::unique_ptr<StatsEngine>> make_cuda_engine(const CudaEngineOptions& options);

}  // namespace fp8scope
