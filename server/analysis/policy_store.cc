#include "fp8scope/analysis/policy_store.h"

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/ingest/sample_validation.h"

namespace fp8scope::server {

PolicyStore::PolicyStore() { default_.version = version_; }

const SamplingPolicy& PolicyStore::effective(const std::string& job) const {
  const auto it = job.empty() ? by_job_.end() : by_job_.find(job);
  return it != by_job_.end() ? it->second : default_;
}

SamplingPolicy PolicyStore::get(const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  return effective(job);
}

void PolicyStore::notify(const std::string& job) {
  for (auto& [id, s] : subscribers_) {
    const bool applies = job.empty() ? by_job_.count(s.job) == 0 : s.job == job;
    if (applies) s.listener(effective(s.job));
  }
}

Result<SamplingPolicy> PolicyStore::set(SamplingPolicy policy) {
  if (Status s = validate_policy(policy); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string job = policy.job;
  if (!job.empty() && by_job_.count(job) == 0 && by_job_.size() >= kMaxJobPolicies) {
    return Status::error(std::to_string(kMaxJobPolicies) + " jobs have a policy of their own already; let one "
                         "inherit the default first");
  }
  policy.version = ++version_;
  (job.empty() ? default_ : by_job_[job]) = policy;
  notify(job);
  return policy;
}

Result<SamplingPolicy> PolicyStore::inherit(const std::string& job) {
  if (job.empty()) return Status::error("inherit: name the job that should follow the default");
  std::lock_guard<std::mutex> lock(mu_);
  if (by_job_.erase(job) > 0) {
    // Its streams see a new version, so they take the default even if they had seen it before.
    default_.version = ++version_;
    notify(job);
  }
  return default_;
}

int PolicyStore::subscribe(const std::string& job, Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  const int id = next_id_++;
  subscribers_.emplace(id, Subscriber{job, std::move(listener)});
  return id;
}

void PolicyStore::unsubscribe(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  subscribers_.erase(id);
}

Status validate_policy(const SamplingPolicy& p) {
  if (std::string error; !LayerPattern::compile(p.layer_regex, &error)) {
    return Status::error("layer_regex: not a layer pattern: " + error);
  }
  if (p.every_n_steps == 0) return Status::error("every_n_steps: expected 1 or more (1 = every step)");
  if (!p.job.empty() && !valid_label(p.job)) {
    return Status::error("job: expected 1.." + std::to_string(kMaxLabelBytes) + " printable ASCII characters");
  }
  if (p.rules.size() > kMaxSamplingRules) {
    return Status::error("rules: at most " + std::to_string(kMaxSamplingRules) + ", got " + std::to_string(p.rules.size()));
  }
  for (std::size_t i = 0; i < p.rules.size(); ++i) {
    if (const std::string problem = rule_problem(p.rules[i].rule); !problem.empty()) {
      return Status::error("rules[" + std::to_string(i) + "]: " + problem);
    }
    if (p.rules[i].source.size() > kMaxRuleSourceBytes) {
      return Status::error("rules[" + std::to_string(i) + "]: source longer than " + std::to_string(kMaxRuleSourceBytes) + " bytes");
    }
  }
  if (p.block_ranges.size() > kMaxBlockRanges) {
    return Status::error("block_ranges: at most " + std::to_string(kMaxBlockRanges) + ", got " +
                         std::to_string(p.block_ranges.size()));
  }
  for (const BlockRange& b : p.block_ranges) {
    if (b.block_size == 0 || b.block_size > kMaxRangeBlockSize || (b.dims != 1 && b.dims != 2)) {
      return Status::error("block_ranges: expected a block_size of 1.." + std::to_string(kMaxRangeBlockSize) +
                           " and dims 1 or 2, got " + std::to_string(b.block_size) + " and " + std::to_string(b.dims));
    }
  }
  if (p.te_logged.size() > kMaxLoggedStats) {
    return Status::error("te_logged: at most " + std::to_string(kMaxLoggedStats) + ", got " + std::to_string(p.te_logged.size()));
  }
  for (const PolicyLoggedStats& l : p.te_logged) {
    if (const std::string problem = rule_problem(l.rule); !problem.empty()) return Status::error("te_logged: " + problem);
    if (l.feature.size() > kMaxLoggedStatBytes || !valid_label(l.feature) || l.stats.size() > kMaxLoggedStatNames) {
      return Status::error("te_logged: expected a feature name and at most " + std::to_string(kMaxLoggedStatNames) + " stats");
    }
    for (const std::string& stat : l.stats) {
      if (stat.size() > kMaxLoggedStatBytes || !valid_label(stat)) {
        return Status::error("te_logged: expected stat names of 1.." + std::to_string(kMaxLoggedStatBytes) +
                             " printable characters");
      }
    }
  }
  if (p.end_step != 0 && p.end_step <= p.start_step) {
    return Status::error("end_step " + std::to_string(p.end_step) + " must be above start_step " +
                         std::to_string(p.start_step));
  }
  return Status();
}

}  // namespace fp8scope::server
