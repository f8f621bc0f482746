// Which steps, layers and tensors the training side samples, as plain code with no protobuf: the
// daemon's default policy and the hook's per-step decision both come from here (v1::Policy is the
// wire form).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"

namespace fp8scope {

// The default samples every 10th step: cheap for the job, dense enough for dashboards.
inline constexpr std::uint64_t kDefaultEveryNSteps = 10;

// Policy.every_n_steps, start_step, end_step: steps start, start + every, ... below end (0 = no
// end); every 0 means every step.
constexpr bool step_sampled(std::uint64_t step, std::uint64_t every_n_steps, std::uint64_t start_step,
                            std::uint64_t end_step) {
  if (step < start_step || (end_step != 0 && step >= end_step)) return false;
  return every_n_steps <= 1 || (step - start_step) % every_n_steps == 0;
}

// A policy's rules (Policy.rules), for selections one layer pattern and one step range cannot say:
// a Transformer Engine debug config's sections, each with its own layers, tensors and frequency. A
// policy with rules samples an operand of a GEMM at a step when any rule selects all three. Plain
// and fixed-size, so the shared segment carries rules as they are.
inline constexpr std::size_t kMaxSamplingRules = 16;
inline constexpr std::size_t kMaxRuleStepRanges = 8;
inline constexpr std::size_t kMaxRuleLayerRegexBytes = 1024;  // with the NUL; patterns stop at 1,000 anyway

struct StepRange {
  std::uint64_t start = 0, end = 0;  // [start, end)
};

struct SamplingRule {
  // Steps: every_n_steps counted from `phase` (TE counts its freq from step 0, not from its
  // start_step), at or above start_step and below end_step (0 = no end), and inside one of the
  // ranges when there are any.
  std::uint64_t every_n_steps = 1, phase = 0, start_step = 0, end_step = 0;
  std::uint32_t range_count = 0;
  StepRange ranges[kMaxRuleStepRanges] = {};
  // The tensors: tensor_bit(gemm, operand) for fprop, dgrad and wgrad; 0 = every input of every
  // GEMM (the operands sampled by default). A GEMM whose role is unknown is selected for an
  // operand the rule takes in any GEMM.
  std::uint32_t tensors = 0;
  // Rules of one group are one section of a TE config: a layer that rules of two groups select is
  // sampled by neither and counted (nvdlfw_inspect refuses a layer two sections target). 0 = none.
  std::uint32_t group = 0;
  // Layer patterns (pattern/layer_pattern.h) searched in the layer's module name, the label before
  // its "#ordinal" (TE names modules, not GEMMs); the module must match both ("" = every layer):
  // TE's layer_types and layer_numbers hold together. Printable ASCII, NUL-terminated.
  char layer_regex[kMaxRuleLayerRegexBytes] = {};
  char and_layer_regex[kMaxRuleLayerRegexBytes] = {};
};

inline constexpr GemmRole kRuleGemms[] = {GemmRole::kFprop, GemmRole::kDgrad, GemmRole::kWgrad};

// A bit for each operand of each role, the unknown role's included.
inline constexpr std::uint32_t kOperandCount = sizeof kOperands / sizeof kOperands[0];
static_assert(kOperandCount * (sizeof kGemmRoles / sizeof kGemmRoles[0]) <= 32);
constexpr std::uint32_t tensor_bit(GemmRole gemm, Operand operand) {
  return 1u << (static_cast<std::uint32_t>(gemm) * kOperandCount + static_cast<std::uint32_t>(operand));
}

constexpr bool rule_selects_step(const SamplingRule& r, std::uint64_t step) {
  if (step < r.start_step || (r.end_step != 0 && step >= r.end_step)) return false;
  if (r.every_n_steps > 1 && (step < r.phase || (step - r.phase) % r.every_n_steps != 0)) return false;
  if (r.range_count == 0) return true;
  for (std::uint32_t i = 0; i < r.range_count && i < kMaxRuleStepRanges; ++i) {
    if (step >= r.ranges[i].start && step < r.ranges[i].end) return true;
  }
  return false;
}

// Whether tensor bits (SamplingRule::tensors) take `operand` of a GEMM with this role.
constexpr bool tensors_select(std::uint32_t tensors, GemmRole gemm, Operand operand) {
  if (tensors == 0) return sampled_by_default(operand);
  if (gemm != GemmRole::kUnknown) return (tensors & tensor_bit(gemm, operand)) != 0;
  for (GemmRole g : kRuleGemms) {
    if ((tensors & tensor_bit(g, operand)) != 0) return true;
  }
  return false;
}

// The module a layer label names: the label before its "#ordinal".
constexpr std::string_view module_of_label(std::string_view label) {
  const std::size_t hash = label.rfind('#');
  return hash == std::string_view::npos ? label : label.substr(0, hash);
}

// Rules as text, one a line, for FP8SCOPE_RULES (`fp8scope run` sets it, so the hook follows a TE
// config before the daemon's policy reaches it) and for people; fields are separated by tabs:
//   every=10  phase=0  start=0  end=0  ranges=5-10,20-30  tensors=fprop:x,wgrad:dy  group=1
//   layers=<pattern>  and_layers=<pattern>
// A field left out has the default above.
std::string format_rules(const std::vector<SamplingRule>& rules);
// The rules of such text, or nothing with `error` naming the line and field.
std::optional<std::vector<SamplingRule>> parse_rules(std::string_view text, std::string* error);

// What makes a rule unusable (a bad range, a pattern too long or that does not compile); "" = none.
std::string rule_problem(const SamplingRule& rule);

}  // namespace fp8scope
