// `fp8scope log --run R --step S --name loss --value V`: records one scalar of a run in the
// daemon's history (for jobs that report their loss from outside the training process).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "fp8scope/cli/connection_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct LogOptions {
  ConnectionFlags connection;
  std::string job = "log", run, name = "loss";
  std::uint64_t step = 0;
  double value = 0;
  std::uint32_t rank = 0;
};

void add_log_command(CLI::App& app, LogOptions& options);
int run_log(const LogOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
