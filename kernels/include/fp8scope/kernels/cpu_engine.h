// The CPU statistics engine: every core, vectorized inner loops, deterministic for a given thread
// count (work is split into fixed pieces whose partial results merge in a fixed order).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

struct CpuEngineOptions {
  int threads = 0;  // <= 0: every hardware thread
  // Which compiled ISA copy of the inner loops to run ("" = the best this CPU supports); tests run
  // every copy the CPU can execute. See cpu_isas().
  std::string isa;
  // How per-tensor recipes on 8- and 16-bit tensors are evaluated: by counting each bit pattern
  // once (kAuto picks it for FP8 and for large 16-bit tensors) or element by element.
  enum class Strategy { kAuto, kElementwise, kValueCounts } strategy = Strategy::kAuto;
};

// The ISA copies compiled in that this CPU can run, best first.
std::vector<std::string> cpu_isas();

Result<std::unique_ptr<StatsEngine>> make_cpu_engine(const CpuEngineOptions& options);
std::unique_ptr<StatsEngine> make_cpu_engine(int threads = 0);

}  // namespace fp8scope
