#include "fp8scope/services/policy_wire.h"

#include "fp8scope/wire/wire.h"

namespace fp8scope::server {

v1::Policy policy_to_wire(const SamplingPolicy& p) {
  v1::Policy w;
  w.set_version(p.version);
  w.set_job(p.job);
  w.set_layer_regex(p.layer_regex);
  for (Operand op : p.operands) w.add_operands(wire::to_wire(op));
  w.set_every_n_steps(p.every_n_steps);
  w.set_start_step(p.start_step);
  w.set_end_step(p.end_step);
  w.set_max_bytes_per_step(p.max_bytes_per_step);
  w.set_experts_per_call(p.experts_per_call);
  for (RecipeKind r : p.recipes) w.add_recipes(wire::to_wire(r));
  for (const PolicyRule& r : p.rules) {
    v1::SamplingRule* rule = w.add_rules();
    *rule = wire::to_wire(r.rule);
    rule->set_source(r.source);
  }
  for (const PolicyLoggedStats& l : p.te_logged) wire::add_logged_stats(w, l.rule, l.feature, l.operand, l.stats);
  for (const BlockRange& b : p.block_ranges) {
    v1::BlockRange* range = w.add_block_ranges();
    range->set_block_size(b.block_size);
    range->set_dims(b.dims);
  }
  return w;
}

Result<SamplingPolicy> policy_from_wire(const v1::Policy& w) {
  SamplingPolicy p;
  p.version = w.version();
  p.job = w.job();
  p.layer_regex = w.layer_regex();
  for (int op : w.operands()) {
    const std::optional<Operand> o = wire::from_wire(static_cast<v1::Operand>(op));
    if (!o) return Status::error("operands: expected x, w, dy or out, got " + std::to_string(op));
    p.operands.push_back(*o);
  }
  p.every_n_steps = w.every_n_steps();
  p.start_step = w.start_step();
  p.end_step = w.end_step();
  p.max_bytes_per_step = w.max_bytes_per_step();
  p.experts_per_call = w.experts_per_call();
  for (int r : w.recipes()) {
    const std::optional<RecipeKind> k = wire::from_wire(static_cast<v1::Recipe>(r));
    if (!k) return Status::error("recipes: unknown recipe " + std::to_string(r));
    p.recipes.push_back(*k);
  }
  if (static_cast<std::size_t>(w.rules_size()) > kMaxSamplingRules) {
    return Status::error("rules: at most " + std::to_string(kMaxSamplingRules) + ", got " + std::to_string(w.rules_size()));
  }
  for (int i = 0; i < w.rules_size(); ++i) {
    std::string error;
    const std::optional<SamplingRule> rule = wire::from_wire(w.rules(i), &error);
    if (!rule) return Status::error("rules[" + std::to_string(i) + "]: " + error);
    p.rules.push_back({*rule, w.rules(i).source()});
  }
  for (const v1::BlockRange& b : w.block_ranges()) p.block_ranges.push_back({b.block_size(), b.dims()});
  if (static_cast<std::size_t>(w.te_logged_size()) > kMaxLoggedStats) {
    return Status::error("te_logged: at most " + std::to_string(kMaxLoggedStats) + ", got " +
                         std::to_string(w.te_logged_size()));
  }
  for (const v1::LoggedStats& l : w.te_logged()) {
    std::string error;
    const std::optional<SamplingRule> rule = wire::from_wire(l.rule(), &error);
    if (!rule) return Status::error("te_logged: " + error);
    const std::optional<Operand> operand = wire::from_wire(l.operand());
    if (!operand) return Status::error("te_logged: expected an operand x, w, dy or out");
    p.te_logged.push_back({*rule, l.feature(), *operand, {l.stats().begin(), l.stats().end()}});
  }
  return p;
}

}  // namespace fp8scope::server
