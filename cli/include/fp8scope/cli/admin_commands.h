// The commands that ask fp8scoped about its state: status, tensors, policy get|set, history.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fp8scope/cli/connection_flags.h"
#include "fp8scope/cli/policy_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct AdminOptions {
  ConnectionFlags connection;
  bool json = false;
  // tensors
  std::string sort, recipe;
  std::uint32_t top = 0;
  std::optional<std::uint32_t> expert;  // only this expert's tensors
  PolicyFlags policy;    // policy set
  bool inherit = false;  // policy set --job J --inherit
  // history; job also for policy get/set
  std::string job, run, layer, gemm, operand;
  std::uint64_t min_step = 0, max_step = 0;
  std::uint32_t limit = 0;
  bool csv = false;
  std::string format = "table";  // history: table, csv or nvdlfw (--csv is csv)
  std::string te_log_dir;        // history --format nvdlfw: per-rank log files below this, as nvdlfw_inspect writes
  std::string te_log_layout = "nvdlfw";  // or "rank-dirs": DIR/rank_<r>/..., as BioNeMo's recipes lay them out
  std::string te_config;         // history --format nvdlfw: only the lines this TE debug config logs
  std::string history;  // history --history: read this store instead of the daemon's Admin API
};

struct AdminCommands {
  CLI::App* status;
  CLI::App* tensors;
  CLI::App* policy_get;
  CLI::App* policy_set;
  CLI::App* history;
};

AdminCommands add_admin_commands(CLI::App& app, AdminOptions& options);

int run_status(const AdminOptions& o, std::ostream& out, std::ostream& err);
int run_tensors(const AdminOptions& o, std::ostream& out, std::ostream& err);
int run_policy_get(const AdminOptions& o, std::ostream& out, std::ostream& err);
int run_policy_set(const AdminOptions& o, std::ostream& out, std::ostream& err);
int run_history(const AdminOptions& o, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
