// The sampling policies training processes follow, and who must hear when one changes. There is
// a default, and a job may have its own (so one team's `fp8scope run --every 1` does not change
// what every other job on a shared daemon samples). Streams subscribe with their job when their
// Hello is accepted and unsubscribe before they are destroyed; a change is pushed to the streams
// it applies to under the store's lock, so no callback runs after unsubscribe returns.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "fp8scope/kernels/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::server {

class PolicyStore {
 public:
  // Jobs with a policy of their own, at most: a bound on what clients can make the daemon keep.
  static constexpr std::size_t kMaxJobPolicies = 1000;

  PolicyStore();

  // The policy `job` follows: its own, else the default ("" = the default).
  v1::Policy get(const std::string& job = "") const;
  // Validates and installs policy.job()'s own policy, or the default when it is "" (the version
  // is assigned here, one counter for all), then notifies the streams it applies to.
  Result<v1::Policy> set(v1::Policy policy);
  // Drops a job's own policy: it follows the default again (returned).
  Result<v1::Policy> inherit(const std::string& job);

  using Listener = std::function<void(const v1::Policy&)>;
  int subscribe(const std::string& job, Listener listener);
  void unsubscribe(int id);

 private:
  const v1::Policy& effective(const std::string& job) const;  // under mu_
  void notify(const std::string& job);                         // under mu_; "" = every job without its own

  mutable std::mutex mu_;
  std::uint64_t version_ = 1;
  v1::Policy default_;
  std::map<std::string, v1::Policy> by_job_;
  struct Subscriber {
    std::string job;
    Listener listener;
  };
  std::map<int, Subscriber> subscribers_;
  int next_id_ = 1;
};

// Checks a policy: a regex that compiles, known operands and recipes, sampling every 1 or more
// steps, a sane step range, a job name that is a valid label.
Status validate_policy(const v1::Policy& policy);

}  // namespace fp8scope::server
