#include "fp8scope/hook/sampler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fp8scope/wire/sampling_rule.h"

namespace fp8scope::hook {
namespace {

void warn(const char* variable, const char* value, const char* expected) {
  std::fprintf(stderr, "fp8scope hook: %s: expected %s, got '%s'; ignored\n", variable, expected, value);
}

void number_from_environment(const char* variable, std::uint64_t& target) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value, &end, 10);
  if (*end != '\0' || value[0] == '-') {
    warn(variable, value, "a non-negative integer");
    return;
  }
  target = v;
}

constexpr std::size_t kMaxCachedLayers = 4096;
static_assert(kMaxSamplingRules < 31, "a layer's rules are bits below Sampler::kConflict");

}  // namespace

shm::PolicyCopy policy_from_environment() {
  shm::PolicyCopy p;
  p.every_n_steps = kDefaultEveryNSteps;
  number_from_environment("FP8SCOPE_EVERY", p.every_n_steps);
  number_from_environment("FP8SCOPE_START_STEP", p.start_step);
  number_from_environment("FP8SCOPE_END_STEP", p.end_step);
  number_from_environment("FP8SCOPE_BYTES_PER_STEP", p.max_bytes_per_step);
  std::uint64_t experts_per_call = 0;
  number_from_environment("FP8SCOPE_EXPERTS_PER_CALL", experts_per_call);
  p.experts_per_call = static_cast<std::uint32_t>(std::min<std::uint64_t>(experts_per_call, 0xFFFFFFFFu));
  if (const char* regex = std::getenv("FP8SCOPE_LAYER_REGEX")) {
    std::snprintf(p.layer_regex, sizeof p.layer_regex, "%s", regex);
  }
  if (const char* operands = std::getenv("FP8SCOPE_OPERANDS"); operands != nullptr && *operands != '\0') {
    std::uint32_t mask = 0;
    std::string list(operands);
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = std::min(list.find(',', start), list.size());
      const std::string item = list.substr(start, comma - start);
      if (const std::optional<Operand> op = operand_from_name(item)) {
        mask |= 1u << static_cast<std::uint32_t>(*op);
      } else if (!item.empty()) {
        warn("FP8SCOPE_OPERANDS", operands, "a comma-separated list of x, w, dy, out");
      }
      start = comma + 1;
    }
    p.operand_mask = mask;
  }
  if (const char* text = std::getenv("FP8SCOPE_RULES"); text != nullptr && *text != '\0') {
    std::string error;
    if (const std::optional<std::vector<SamplingRule>> rules = parse_rules(text, &error)) {
      p.rule_count = static_cast<std::uint32_t>(rules->size());
      std::copy(rules->begin(), rules->end(), p.rules);
    } else {
      error = "sampling rules (" + error + ")";
      warn("FP8SCOPE_RULES", text, error.c_str());
    }
  }
  return p;
}

// The policy's own operands are tensor bits that take them in every GEMM.
TensorSelection TensorSelection::of_operands(std::uint32_t operand_mask) {
  std::uint32_t tensors = 0;
  for (GemmRole g : kRuleGemms) {
    for (const OperandTerm& o : kOperands) {
      if ((operand_mask & (1u << static_cast<std::uint32_t>(o.value))) != 0) tensors |= tensor_bit(g, o.value);
    }
  }
  return of_tensors(tensors);
}

TensorSelection TensorSelection::of_tensors(std::uint32_t tensors) {
  std::uint32_t bits = 0;
  for (const GemmRoleTerm& g : kGemmRoles) {
    for (const OperandTerm& o : kOperands) {
      if (tensors_select(tensors, g.value, o.value)) bits |= tensor_bit(g.value, o.value);
    }
  }
  return TensorSelection(bits);
}

Sampler::Sampler(const shm::PolicyCopy& initial) : incoming_(std::make_unique<shm::PolicyCopy>()) {
  std::lock_guard<std::mutex> lock(mu_);
  adopt(initial);
}

void Sampler::adopt(const shm::PolicyCopy& p) {
  every_.store(p.every_n_steps, std::memory_order_relaxed);
  start_.store(p.start_step, std::memory_order_relaxed);
  end_.store(p.end_step, std::memory_order_relaxed);
  operand_mask_.store(p.operand_mask, std::memory_order_relaxed);
  max_bytes_per_step_ = p.max_bytes_per_step;
  experts_per_call_ = p.experts_per_call;
  layer_cache_.clear();
  layer_pattern_.reset();
  if (p.layer_regex[0] != '\0') {
    std::string error;
    layer_pattern_ = LayerPattern::compile(p.layer_regex, &error);
    if (!layer_pattern_) {
      error = "a layer pattern (" + error + ")";
      warn("layer regex", p.layer_regex, error.c_str());
    }
  }
  // A rule whose pattern does not compile (the daemon checks them all) selects nothing rather
  // than every layer.
  rules_.clear();
  for (std::uint32_t i = 0; i < p.rule_count && i < kMaxSamplingRules; ++i) {
    CompiledRule r{p.rules[i], std::nullopt, std::nullopt};
    bool compiled = true;
    for (auto [text, target] : {std::pair{r.rule.layer_regex, &r.pattern}, std::pair{r.rule.and_layer_regex, &r.and_pattern}}) {
      if (text[0] == '\0') continue;
      std::string error;
      *target = LayerPattern::compile(text, &error);
      if (!*target) {
        error = "a layer pattern (" + error + "); the rule is left out";
        warn("sampling rule", text, error.c_str());
        compiled = false;
      }
    }
    if (compiled) rules_.push_back(std::move(r));
  }
  has_rules_.store(p.rule_count > 0, std::memory_order_relaxed);
  rule_step_.store(0, std::memory_order_relaxed);
}

bool Sampler::step_of_rules(std::uint64_t step) {
  const std::uint64_t cached = rule_step_.load(std::memory_order_relaxed);
  if (cached != 0 && (cached - 1) >> 1 == step) return ((cached - 1) & 1) != 0;
  std::lock_guard<std::mutex> lock(mu_);
  bool sampled = false;
  for (const CompiledRule& r : rules_) sampled = sampled || rule_selects_step(r.rule, step);
  rule_step_.store(((step << 1) | (sampled ? 1 : 0)) + 1, std::memory_order_relaxed);
  return sampled;
}

bool Sampler::step_selected(const shm::Header* segment, std::uint64_t step) {
  if (segment != nullptr) {
    const std::uint64_t seq = segment->policy.seq.load(std::memory_order_acquire);
    if (seq != seen_seq_.load(std::memory_order_relaxed) && seq % 2 == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (shm::read_policy(segment, *incoming_) && incoming_->version != 0) {
        seen_seq_.store(seq, std::memory_order_relaxed);
        adopt(*incoming_);
      }
    }
  }
  if (has_rules_.load(std::memory_order_relaxed)) return step_of_rules(step);
  return step_sampled(step, every_.load(std::memory_order_relaxed), start_.load(std::memory_order_relaxed),
                      end_.load(std::memory_order_relaxed));
}

TensorSelection Sampler::select(std::uint64_t step, const std::string& layer, bool* conflict) {
  return selection(layer, conflict, &step);
}

TensorSelection Sampler::selectable(const std::string& layer, bool* conflict) {
  return selection(layer, conflict, nullptr);
}

TensorSelection Sampler::selection(const std::string& layer, bool* conflict, const std::uint64_t* step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rules_.empty() && !has_rules_.load(std::memory_order_relaxed)) {
    return layer_matches(layer) ? TensorSelection::of_operands(operand_mask_.load(std::memory_order_relaxed))
                                : TensorSelection();
  }
  const std::uint32_t matching = rules_of_layer(layer);
  if (conflict != nullptr) *conflict = matching == kConflict;
  if (matching == kConflict) return TensorSelection();
  TensorSelection selection;
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    if ((matching >> i & 1u) != 0 && (step == nullptr || rule_selects_step(rules_[i].rule, *step))) {
      selection |= TensorSelection::of_tensors(rules_[i].rule.tensors);
    }
  }
  return selection;
}

bool Sampler::layer_matches(const std::string& layer) {
  if (!layer_pattern_) return true;
  if (const auto it = layer_cache_.find(layer); it != layer_cache_.end()) return it->second != 0;
  if (layer_cache_.size() >= kMaxCachedLayers) layer_cache_.clear();
  const bool selected = layer_pattern_->search(layer);
  layer_cache_.emplace(layer, selected ? 1u : 0u);
  return selected;
}

std::uint32_t Sampler::rules_of_layer(const std::string& layer) {
  if (const auto it = layer_cache_.find(layer); it != layer_cache_.end()) return it->second;
  if (layer_cache_.size() >= kMaxCachedLayers) layer_cache_.clear();
  const std::string_view module = module_of_label(layer);
  std::uint32_t matching = 0, group = 0;
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    const CompiledRule& r = rules_[i];
    if ((r.pattern && !r.pattern->search(module)) || (r.and_pattern && !r.and_pattern->search(module))) continue;
    if (r.rule.group != 0 && group != 0 && r.rule.group != group) {
      matching = kConflict;
      break;
    }
    if (r.rule.group != 0) group = r.rule.group;
    matching |= 1u << i;
  }
  layer_cache_.emplace(layer, matching);
  return matching;
}

bool Sampler::charge(std::uint64_t step, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (step != budget_step_) {
    budget_step_ = step;
    budget_used_ = 0;
  }
  if (max_bytes_per_step_ != 0 && budget_used_ + bytes > max_bytes_per_step_) return false;
  budget_used_ += bytes;
  return true;
}

std::uint32_t Sampler::experts_per_call(std::uint32_t experts) {
  std::lock_guard<std::mutex> lock(mu_);
  return experts_per_call_ == 0 || experts_per_call_ >= experts ? experts : experts_per_call_;
}

std::vector<std::uint32_t> Sampler::experts_for_call(const std::string& layer, std::uint32_t experts) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::uint32_t> chosen;
  if (experts_per_call_ == 0 || experts_per_call_ >= experts) {
    for (std::uint32_t e = 0; e < experts; ++e) chosen.push_back(e);
    return chosen;
  }
  if (next_expert_.size() >= kMaxCachedLayers && !next_expert_.count(layer)) next_expert_.clear();
  std::uint32_t& next = next_expert_[layer];
  for (std::uint32_t i = 0; i < experts_per_call_; ++i) chosen.push_back((next + i) % experts);
  next = (next + experts_per_call_) % experts;
  return chosen;
}

}  // namespace fp8scope::hook
