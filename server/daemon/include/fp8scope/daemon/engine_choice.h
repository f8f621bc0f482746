// Which statistics engine the daemon runs: --backend cuda (the GPU or an error), cpu, or auto
// (CUDA when a device is usable, else the CPU, saying why). A CUDA engine runs behind a fallback:
// a failed analysis is redone on the CPU and logged, and repeated failures switch to the CPU for
// good, so a sick GPU never stops the daemon.
#pragma once

#include <memory>
#include <string>

#include "fp8scope/daemon/daemon_config.h"
#include "fp8scope/kernels/gpu_gemm_check.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope::server {

struct EngineChoice {
  std::unique_ptr<StatsEngine> engine;
  std::string backend;                   // "cpu" or "cuda:N"
  std::unique_ptr<GpuGemmCheck> gemm;    // null: GEMM checks run as the CPU emulation
};

Result<EngineChoice> choose_engine(const DaemonConfig& config);

// Runs `primary`, and `fallback` whenever primary fails; after `max_failures` failures in a row it
// stays on the fallback.
std::unique_ptr<StatsEngine> with_fallback(std::unique_ptr<StatsEngine> primary, std::unique_ptr<StatsEngine> fallback,
                                           int max_failures = 3);

}  // namespace fp8scope::server
