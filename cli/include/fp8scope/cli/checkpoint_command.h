// `fp8scope checkpoint EXPORT [--reference CHECKPOINT] [--run R] [--json] [-o report.html]`: an
// FP8/FP4 export checked as serving engines would load it (study/checkpoint/), against the
// weights it came from and against what training ended with (the history's inference check).
#pragma once

#include <ostream>
#include <string>

#include "fp8scope/cli/study_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct CheckpointOptions {
  std::string export_path, reference, output;
  StudyFlags history;  // --run and where its history is
  bool json = false, progress = false;
};

void add_checkpoint_command(CLI::App& app, CheckpointOptions& options);
// 0: every weight loads as it should; 1: a weight is wrong (an error finding); 2: bad input (an
// export that cannot be opened, a convention fp8scope does not read, no such run).
int run_checkpoint(const CheckpointOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
