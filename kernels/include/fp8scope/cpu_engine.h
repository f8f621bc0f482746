// The CPU statistics engine: every core, vectorized inner loops, deterministic for a given thread
// count (work is split statically and partial results merge in a fixed order).
#pragma once

#include <memory>

#include "fp8scope/stats_engine.h"

namespace fp8scope {

// threads <= 0 uses every hardware thread.
std::unique_ptr<StatsEngine> make_cpu_engine(int threads = 0);

}  // namespace fp8scope
