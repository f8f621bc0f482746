#include "fp8scope/cli/policy_flags.h"

#include <CLI/CLI.hpp>

#include "fp8scope/cli/number_checks.h"
#include "fp8scope/te/sampling_config.h"

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/wire/sampling_rule.h"
#include "fp8scope/wire/wire.h"

namespace fp8scope::cli {

void add_policy_flags(CLI::App* cmd, PolicyFlags& f) {
  cmd->add_option("--te-config", f.te_config,
                  "Sample what a Transformer Engine debug-API YAML (nvdlfw_inspect) logs: its layers, tensors and steps "
                  "(docs/operations.md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--layer-regex", f.layer_regex, "Sample layers whose name this layer pattern matches (docs/operations.md; '' = all)");
  cmd->add_option("--operands", f.operands, "Operands to sample: x, w, dy, out (repeatable; out is what the GEMM wrote)")->delimiter(',');
  cmd->add_option("--every", f.every, "Sample every N steps");
  cmd->add_option("--start-step", f.start_step, "First step to sample")->check(step_number());
  cmd->add_option("--end-step", f.end_step, "Stop sampling at this step (0 = never)")->check(step_number());
  cmd->add_option("--bytes-per-step", f.bytes_per_step, "Per-process byte budget per step (0 = no limit)")
      ->check(unsigned_number());
  cmd->add_option("--experts-per-call", f.experts_per_call,
                  "Batched and grouped GEMMs: experts sampled per call, rotating so every expert is seen (0 = all)");
  cmd->add_option("--recipe", f.recipes, "Recipes the daemon evaluates (repeatable; default: every recipe but " +
                                               off_by_default_recipe_list() + ")");
  cmd->add_flag("--reset", f.reset, "Start from the default policy instead of the current one");
}

const Result<te::TeConfig>& PolicyFlags::te_config_read() const {
  if (!te_config_read_) te_config_read_ = std::make_shared<const Result<te::TeConfig>>(te::read_te_config(te_config.value()));
  return *te_config_read_;
}

bool te_config_samples_nothing(const PolicyFlags& f) {
  return f.te_config && f.te_config_read().ok() && f.te_config_read().value().rules.empty();
}

Result<v1::Policy> apply_policy_flags(const PolicyFlags& f, v1::Policy p) {
  if (f.te_config) {
    if (f.selects()) {
      return Status::error("--te-config says what is sampled: it goes without --layer-regex, --operands, --every, "
                           "--start-step and --end-step");
    }
    const Result<te::TeConfig>& config = f.te_config_read();
    if (!config.ok()) return Status::error("--te-config: " + config.message());
    if (config.value().rules.empty()) {
      return Status::error("--te-config: " + *f.te_config + " asks for nothing fp8scope samples (each part left out is listed)");
    }
    p.clear_rules();
    p.clear_layer_regex();
    p.clear_operands();
    for (const te::TeConfigRule& r : config.value().rules) {
      v1::SamplingRule* rule = p.add_rules();
      *rule = wire::to_wire(r.rule);
      rule->set_source(r.source.substr(0, 200));
    }
    p.clear_te_logged();
    for (const te::TeLoggedStats& l : config.value().logged) {
      wire::add_logged_stats(p, l.rule, te::feature_name(l.feature), l.operand, l.stats);
    }
    p.clear_block_ranges();
    for (const BlockRange& b : config.value().block_ranges) {
      v1::BlockRange* range = p.add_block_ranges();
      range->set_block_size(b.block_size);
      range->set_dims(b.dims);
    }
    if (f.recipes.empty() && !config.value().recipes.empty()) {
      p.clear_recipes();
      for (RecipeKind k : config.value().recipes) p.add_recipes(wire::to_wire(k));
    }
  } else if (f.selects() && p.rules_size() > 0) {
    return Status::error("the policy samples by the rules of a TE config (policy get shows them): give --te-config "
                         "again, or --reset to select with flags");
  }
  if (!f.operands.empty()) {
    p.clear_operands();
    for (const std::string& op : f.operands) {
      const auto parsed = operand_from_name(op);
      if (!parsed) return Status::error("--operands: expected x, w, dy or out, got " + op);
      p.add_operands(wire::to_wire(*parsed));
    }
  }
  if (!f.recipes.empty()) {
    p.clear_recipes();
    for (const std::string& r : f.recipes) {
      const auto kind = recipe_kind_from_name(r);
      if (!kind) return Status::error("--recipe: unknown recipe " + r);
      p.add_recipes(wire::to_wire(*kind));
    }
  }
  if (std::string error; f.layer_regex && !LayerPattern::compile(*f.layer_regex, &error)) {
    return Status::error("--layer-regex: not a layer pattern: " + error);
  }
  if (f.layer_regex) p.set_layer_regex(*f.layer_regex);
  if (f.every && *f.every == 0) return Status::error("--every: expected 1 or more (1 = every step)");
  if (f.every) p.set_every_n_steps(*f.every);
  if (f.start_step) p.set_start_step(*f.start_step);
  if (f.end_step) p.set_end_step(*f.end_step);
  if (f.bytes_per_step) p.set_max_bytes_per_step(*f.bytes_per_step);
  if (f.experts_per_call) p.set_experts_per_call(*f.experts_per_call);
  return p;
}

std::vector<std::string> te_config_notes(const PolicyFlags& f) {
  if (!f.te_config) return {};
  const Result<te::TeConfig>& config = f.te_config_read();
  return config.ok() ? config.value().not_applied : std::vector<std::string>{};
}

std::map<std::string, std::string> policy_environment(const PolicyFlags& f) {
  std::map<std::string, std::string> env;
  if (f.te_config) {
    if (const Result<te::TeConfig>& config = f.te_config_read(); config.ok()) {
      std::vector<SamplingRule> rules;
      for (const te::TeConfigRule& r : config.value().rules) rules.push_back(r.rule);
      env["FP8SCOPE_RULES"] = format_rules(rules);
    }
  }
  if (f.every) env["FP8SCOPE_EVERY"] = std::to_string(*f.every);
  if (f.start_step) env["FP8SCOPE_START_STEP"] = std::to_string(*f.start_step);
  if (f.end_step) env["FP8SCOPE_END_STEP"] = std::to_string(*f.end_step);
  if (f.bytes_per_step) env["FP8SCOPE_BYTES_PER_STEP"] = std::to_string(*f.bytes_per_step);
  if (f.experts_per_call) env["FP8SCOPE_EXPERTS_PER_CALL"] = std::to_string(*f.experts_per_call);
  if (f.layer_regex) env["FP8SCOPE_LAYER_REGEX"] = *f.layer_regex;
  if (!f.operands.empty()) {
    std::string list;
    for (const std::string& op : f.operands) list += (list.empty() ? "" : ",") + op;
    env["FP8SCOPE_OPERANDS"] = list;
  }
  return env;
}

grpc::Status send_policy(v1::Admin::Stub& stub, const ConnectionOptions& options, double timeout_seconds,
                         const PolicyFlags& flags, const std::string& job, bool inherit, v1::Policy* result) {
  v1::Policy current;
  current.set_every_n_steps(kDefaultEveryNSteps);  // --reset: the daemon's default
  if (!flags.reset && !inherit) {
    v1::GetPolicyRequest get;
    get.set_job(job);
    const grpc::Status st = stub.GetPolicy(call_context(options, timeout_seconds).get(), get, &current);
    if (!st.ok()) return st;
  }
  v1::SetPolicyRequest req;
  *req.mutable_policy() = apply_policy_flags(flags, current).value();
  req.mutable_policy()->set_job(job);
  req.set_inherit(inherit);
  return stub.SetPolicy(call_context(options, timeout_seconds).get(), req, result);
}

}  // namespace fp8scope::cli
