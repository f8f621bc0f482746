// Which cores the shipper runs on. Spawned by the hook, it would otherwise share the training
// process's cores and preempt its training thread; a job pins it elsewhere with
// FP8SCOPE_SHIPPER_CPUS (or `fp8scope run --shipper-cpus`).
#pragma once

#include <string>
#include <vector>

#include "fp8scope/kernels/status.h"

namespace fp8scope::shipper {

// A CPU list as taskset and cpuset write it ("3", "0,2", "4-7,12"): the cores, ascending, once each.
Result<std::vector<int>> parse_cpu_list(const std::string& text);

// Moves the calling process to `cpus` (sched_setaffinity); threads it starts later inherit them.
Status run_on_cpus(const std::vector<int>& cpus);

}  // namespace fp8scope::shipper
