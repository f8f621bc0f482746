#include "policy_store.h"

#include "fp8scope/layer_pattern.h"
#include "fp8scope/sampling_rule.h"
#include "fp8scope/wire.h"

namespace fp8scope::server {

PolicyStore::PolicyStore() {
  policy_.set_version(1);
  policy_.set_every_n_steps(kDefaultEveryNSteps);
}

v1::Policy PolicyStore::get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_;
}

Result<v1::Policy> PolicyStore::set(v1::Policy policy) {
  if (Status s = validate_policy(policy); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  policy.set_version(policy_.version() + 1);
  policy_ = policy;
  for (auto& [id, listener] : listeners_) listener(policy_);
  return policy_;
}

int PolicyStore::subscribe(Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  const int id = next_id_++;
  listeners_.emplace(id, std::move(listener));
  return id;
}

void PolicyStore::unsubscribe(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(id);
}

Status validate_policy(const v1::Policy& p) {
  if (std::string error; !LayerPattern::compile(p.layer_regex(), &error)) {
    return Status::error("layer_regex: not a layer pattern: " + error);
  }
  for (int op : p.operands()) {
    if (!wire::from_wire(static_cast<v1::Operand>(op))) return Status::error("operands: expected x, w or dy");
  }
  for (int r : p.recipes()) {
    if (!wire::from_wire(static_cast<v1::Recipe>(r))) return Status::error("recipes: unknown recipe " + std::to_string(r));
  }
  if (p.end_step() != 0 && p.end_step() <= p.start_step()) {
    return Status::error("end_step " + std::to_string(p.end_step()) + " must be above start_step " +
                         std::to_string(p.start_step()));
  }
  return Status();
}

}  // namespace fp8scope::server
