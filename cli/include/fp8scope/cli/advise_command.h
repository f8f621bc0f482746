// `fp8scope advise --run R [--baseline B] [--format table|te-yaml|megatron|json] [-o FILE]`: a
// risk score and a recommendation per sampled tensor of a run, written for people, for
// Transformer Engine's debug API or as a Megatron-style layer list.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "fp8scope/cli/study_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct AdviseOptions {
  StudyFlags study;
  std::string format = "table", output;
  std::size_t top = 30;
  std::vector<std::string> te_features;  // te-yaml: features beyond TE's main branch to write too
};

void add_advise_command(CLI::App& app, AdviseOptions& options);
// 0: advised; 2: bad input (no history, no such run, an unwritable output).
int run_advise(const AdviseOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
