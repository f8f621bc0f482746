// The sampling policy every training process follows, and who must hear when it changes. Streams
// subscribe when their Hello is accepted and unsubscribe before they are destroyed; a change is
// pushed to every subscriber under the store's lock, so no callback runs after unsubscribe returns.
#pragma once

#include <functional>
#include <map>
#include <mutex>

#include "fp8scope/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::server {

class PolicyStore {
 public:
  PolicyStore();

  v1::Policy get() const;
  // Validates and installs a policy (its version is assigned here), then notifies subscribers.
  Result<v1::Policy> set(v1::Policy policy);

  using Listener = std::function<void(const v1::Policy&)>;
  int subscribe(Listener listener);
  void unsubscribe(int id);

 private:
  mutable std::mutex mu_;
  v1::Policy policy_;
  std::map<int, Listener> listeners_;
  int next_id_ = 1;
};

// Checks a policy: a regex that compiles, known operands and recipes, a sane step range.
Status validate_policy(const v1::Policy& policy);

}  // namespace fp8scope::server
