// The sampling policies training processes follow, and who must hear when one changes. There is
// a default, and a job may have its own (so one team's `fp8scope run --every 1` does not change
// what every other job on a shared daemon samples). Streams subscribe with their job when their
// Hello is accepted and unsubscribe before they are destroyed; a change is pushed to the streams
// it applies to under the store's lock, so no callback runs after unsubscribe returns.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fp8scope/kernels/block_dynamic_range.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/recipe_kind.h"
#include "fp8scope/wire/sampling_rule.h"

namespace fp8scope::server {

inline constexpr std::size_t kMaxRuleSourceBytes = 200;

// A rule of a policy, and where it came from (for people: "te-config sections.log_fc1").
struct PolicyRule {
  SamplingRule rule;
  std::string source;
};

// What the training processes sample and the daemon evaluates (the wire's Policy, which the
// services convert: services/policy_wire.h).
// What a TE config's feature logs for one tensor (te::TeLoggedStats, its feature by TE's name):
// the lines the daemon's TE log writes for a job that runs the config.
struct PolicyLoggedStats {
  SamplingRule rule;
  std::string feature;
  Operand operand = Operand::kX;
  std::vector<std::string> stats;
};
inline constexpr std::size_t kMaxLoggedStats = 64, kMaxLoggedStatNames = 32, kMaxLoggedStatBytes = 128;

struct SamplingPolicy {
  std::uint64_t version = 0;        // increases on every change
  std::string job;                  // whose own policy this is; "" = the default of every other job
  std::string layer_regex;          // a layer pattern; "" = every layer
  std::vector<Operand> operands;    // empty = x, w and dy
  std::uint64_t every_n_steps = kDefaultEveryNSteps;
  std::uint64_t start_step = 0, end_step = 0;  // end exclusive; 0 = no end
  std::uint64_t max_bytes_per_step = 0;        // per process; 0 = no limit
  std::uint32_t experts_per_call = 0;          // batched and grouped GEMMs, rotating; 0 = all
  std::vector<RecipeKind> recipes;  // what the daemon evaluates; empty = every recipe
  // When any, they replace layer_regex, operands, every_n_steps, start_step and end_step.
  std::vector<PolicyRule> rules;
  std::vector<BlockRange> block_ranges;  // TE's max_blockwise_dynamic_range shapes to compute
  std::vector<PolicyLoggedStats> te_logged;  // empty: the TE log writes every statistic
};

class PolicyStore {
 public:
  // Jobs with a policy of their own, at most: a bound on what clients can make the daemon keep.
  static constexpr std::size_t kMaxJobPolicies = 1000;

  PolicyStore();

  // The policy `job` follows: its own, else the default ("" = the default).
  SamplingPolicy get(const std::string& job = "") const;
  // Validates and installs policy.job's own policy, or the default when it is "" (the version
  // is assigned here, one counter for all), then notifies the streams it applies to.
  Result<SamplingPolicy> set(SamplingPolicy policy);
  // Drops a job's own policy: it follows the default again (returned).
  Result<SamplingPolicy> inherit(const std::string& job);

  using Listener = std::function<void(const SamplingPolicy&)>;
  int subscribe(const std::string& job, Listener listener);
  void unsubscribe(int id);

 private:
  const SamplingPolicy& effective(const std::string& job) const;  // under mu_
  void notify(const std::string& job);                         // under mu_; "" = every job without its own

  mutable std::mutex mu_;
  std::uint64_t version_ = 1;
  SamplingPolicy default_;
  std::map<std::string, SamplingPolicy> by_job_;
  struct Subscriber {
    std::string job;
    Listener listener;
  };
  std::map<int, Subscriber> subscribers_;
  int next_id_ = 1;
};

// Checks a policy: a regex that compiles, sampling every 1 or more steps, a sane step range, a job
// name that is a valid label.
Status validate_policy(const SamplingPolicy& policy);

}  // namespace fp8scope::server
