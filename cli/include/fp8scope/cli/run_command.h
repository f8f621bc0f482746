// `fp8scope run [flags] -- CMD ARGS...`: runs a training command under the hook. Sets LD_PRELOAD
// and the FP8SCOPE_* environment the hook and its shipper read, optionally starts a local daemon
// when none answers (it keeps running afterwards, for `fp8scope tensors` and the dashboards),
// applies the policy flags to the daemon, runs CMD and returns its exit status (128 + signal when
// a signal ended it).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "fp8scope/cli/connection_flags.h"
#include "fp8scope/cli/policy_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct RunOptions {
  ConnectionFlags connection;
  PolicyFlags policy;
  std::string job, run;
  bool start_daemon = false;
  std::string data_dir = "fp8scope-data";
  std::string daemon_metrics = "127.0.0.1:9767";
  std::string shipper_cpus;  // FP8SCOPE_SHIPPER_CPUS for the shipper the hook starts
  double store_wait_seconds = 120;  // after the job: how long to wait for its samples to be stored
  std::vector<std::string> command;
};

CLI::App* add_run_command(CLI::App& app, RunOptions& options);
int run_run(const RunOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
