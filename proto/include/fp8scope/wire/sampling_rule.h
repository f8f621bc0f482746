// Which steps the training side samples, as plain constexpr code with no protobuf: the daemon's
// default policy and the hook's per-step decision both come from here (v1::Policy is the wire form).
#pragma once

#include <cstdint>

namespace fp8scope {

// The default samples every 10th step: cheap for the job, dense enough for dashboards.
inline constexpr std::uint64_t kDefaultEveryNSteps = 10;

// Policy.every_n_steps, start_step, end_step: steps start, start + every, ... below end (0 = no
// end); every 0 means every step.
constexpr bool step_sampled(std::uint64_t step, std::uint64_t every_n_steps, std::uint64_t start_step,
                            std::uint64_t end_step) {
  if (step < start_step || (end_step != 0 && step >= end_step)) return false;
  return every_n_steps <= 1 || (step - start_step) % every_n_steps == 0;
}

}  // namespace fp8scope
