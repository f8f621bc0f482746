// The sampling-policy flags `policy set` and `run` share, and what they turn into: a change to
// the daemon's v1::Policy, and the FP8SCOPE_* variables the hook follows until the daemon's policy
// reaches it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp8scope/cli/connection_flags.h"
#include "fp8scope/te/sampling_config.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct PolicyFlags {
  std::optional<std::string> te_config;  // a TE debug-API YAML: its sections become the policy's rules
  std::optional<std::string> layer_regex;
  std::vector<std::string> operands, recipes;
  std::optional<std::uint64_t> every, start_step, end_step, bytes_per_step;
  std::optional<std::uint32_t> experts_per_call;
  bool reset = false;

  bool any() const {
    return te_config || layer_regex || !operands.empty() || !recipes.empty() || every || start_step || end_step ||
           bytes_per_step || experts_per_call || reset;
  }
  // The flags that say what is sampled, which a TE config's rules replace.
  bool selects() const { return layer_regex || !operands.empty() || every || start_step || end_step; }
  // --te-config's file, read the first time a command asks: what is applied, printed and passed to
  // the hook is one reading of the file, however often it is asked for.
  const Result<te::TeConfig>& te_config_read() const;

 private:
  mutable std::shared_ptr<const Result<te::TeConfig>> te_config_read_;
};

void add_policy_flags(CLI::App* cmd, PolicyFlags& flags);

// `base` with the given flags applied (base is the daemon's current policy, or the default with
// --reset); an error names the bad flag. With --te-config the config's rules replace the
// selection, and its stats name the recipes unless --recipe does.
Result<v1::Policy> apply_policy_flags(const PolicyFlags& flags, v1::Policy base);

// What --te-config leaves out and why, one line each, for the command to print; nothing without it.
std::vector<std::string> te_config_notes(const PolicyFlags& flags);

// True when --te-config reads well and asks for nothing fp8scope samples (apply_policy_flags then
// refuses it: `policy set` has nothing to set, while `run` runs the job unsampled).
bool te_config_samples_nothing(const PolicyFlags& flags);

// Sends the flags to the daemon as `job`'s own policy ("" = the default): the policy the job
// follows now (the default with --reset) with the flags applied. With `inherit`, drops the job's own
// policy instead. The flags must have passed apply_policy_flags. Each call gets timeout_seconds.
grpc::Status send_policy(v1::Admin::Stub& stub, const ConnectionOptions& options, double timeout_seconds,
                         const PolicyFlags& flags, const std::string& job, bool inherit, v1::Policy* result);

// FP8SCOPE_EVERY, _START_STEP, _END_STEP, _BYTES_PER_STEP, _LAYER_REGEX, _OPERANDS, _RULES for the
// flags given.
std::map<std::string, std::string> policy_environment(const PolicyFlags& flags);

}  // namespace fp8scope::cli
