// `fp8scope compare --run FP8RUN --baseline BF16RUN [--data-dir DIR]`: the two runs' loss side by
// side from the daemon's history: spikes (height, steps to recover), divergence, and whether the
// run's are more frequent or recover more slowly than the baseline's; when the run sampled
// tensors, the ones that moved most at each of its spike and divergence onsets; when the run is an
// FP8 inference job and the baseline its training run, the inference check (inference_check.h).
#pragma once

#include <ostream>
#include <string>

#include "fp8scope/cli/study_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct CompareOptions {
  StudyFlags study;
  std::size_t suspects = 5;  // per onset
  bool json = false;
};

void add_compare_command(CLI::App& app, CompareOptions& options);
// 0: compared (whatever the verdict); 2: bad input (no history, nothing the two runs share).
int run_compare(const CompareOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
