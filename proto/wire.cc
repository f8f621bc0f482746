#include "fp8scope/wire/wire.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope::wire {
namespace {

// A value added to the proto (always at the end: numbers are never reused) without its row, or a
// row without its proto value, fails the build here; wire_vocabulary_test checks every value both
// ways through the descriptors.
static_assert(vocabulary::max_wire(kDTypes) == v1::DType_MAX);
static_assert(vocabulary::max_wire(kGemmRoles) == v1::Gemm_MAX);
static_assert(vocabulary::max_wire(kOperands) == v1::Operand_MAX);
static_assert(vocabulary::max_wire(kRecipeKinds) == v1::Recipe_MAX);
static_assert(vocabulary::max_wire(kScaleLayouts) == v1::ScaleMode_MAX);
static_assert(vocabulary::max_wire(kCastSources) == v1::CastSource_MAX);
static_assert(vocabulary::max_wire(kActivations) == v1::Activation_MAX);

template <class Wire, class Row, std::size_t N>
Wire wire_of(const Row (&rows)[N], decltype(Row::value) value) {
  const Row* r = vocabulary::row_of(rows, value);
  return static_cast<Wire>(r != nullptr ? r->wire : 0);
}

template <class Row, std::size_t N>
std::optional<decltype(Row::value)> ours_of(const Row (&rows)[N], int wire) {
  const Row* r = wire > 0 ? vocabulary::row_on_wire(rows, static_cast<std::uint32_t>(wire)) : nullptr;
  return r != nullptr ? std::optional(r->value) : std::nullopt;
}

}  // namespace

v1::DType to_wire(DType d) { return wire_of<v1::DType>(kDTypes, d); }
v1::Gemm to_wire(GemmRole g) { return wire_of<v1::Gemm>(kGemmRoles, g); }
v1::Operand to_wire(Operand o) { return wire_of<v1::Operand>(kOperands, o); }
v1::Recipe to_wire(RecipeKind r) { return wire_of<v1::Recipe>(kRecipeKinds, r); }
v1::ScaleMode to_wire(ScaleLayout l) { return wire_of<v1::ScaleMode>(kScaleLayouts, l); }
v1::CastSource to_wire(CastSource s) { return wire_of<v1::CastSource>(kCastSources, s); }
v1::Activation to_wire(Activation a) { return wire_of<v1::Activation>(kActivations, a); }

std::optional<DType> from_wire(v1::DType d) { return ours_of(kDTypes, d); }
std::optional<GemmRole> from_wire(v1::Gemm g) { return ours_of(kGemmRoles, g); }
std::optional<Operand> from_wire(v1::Operand o) { return ours_of(kOperands, o); }
std::optional<RecipeKind> from_wire(v1::Recipe r) { return ours_of(kRecipeKinds, r); }
std::optional<ScaleLayout> from_wire(v1::ScaleMode m) { return ours_of(kScaleLayouts, m); }
std::optional<CastSource> from_wire(v1::CastSource s) { return ours_of(kCastSources, s); }
std::optional<Activation> from_wire(v1::Activation a) { return ours_of(kActivations, a); }

v1::SamplingRule to_wire(const SamplingRule& r) {
  v1::SamplingRule w;
  w.set_every_n_steps(r.every_n_steps);
  w.set_phase(r.phase);
  w.set_start_step(r.start_step);
  w.set_end_step(r.end_step);
  for (std::uint32_t i = 0; i < r.range_count && i < kMaxRuleStepRanges; ++i) {
    v1::StepRange* range = w.add_ranges();
    range->set_start(r.ranges[i].start);
    range->set_end(r.ranges[i].end);
  }
  for (GemmRole g : kRuleGemms) {
    for (const OperandTerm& o : kOperands) {
      if ((r.tensors & tensor_bit(g, o.value)) == 0) continue;
      v1::RuleTensor* t = w.add_tensors();
      t->set_gemm(to_wire(g));
      t->set_operand(to_wire(o.value));
    }
  }
  w.set_layer_regex(std::string(r.layer_regex, strnlen(r.layer_regex, sizeof r.layer_regex)));
  w.set_and_layer_regex(std::string(r.and_layer_regex, strnlen(r.and_layer_regex, sizeof r.and_layer_regex)));
  w.set_group(r.group);
  return w;
}

std::optional<SamplingRule> from_wire(const v1::SamplingRule& w, std::string* error) {
  const auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return std::nullopt;
  };
  SamplingRule r;
  r.every_n_steps = w.every_n_steps();
  r.phase = w.phase();
  r.start_step = w.start_step();
  r.end_step = w.end_step();
  if (static_cast<std::size_t>(w.ranges_size()) > kMaxRuleStepRanges) {
    return fail("more than " + std::to_string(kMaxRuleStepRanges) + " step ranges");
  }
  for (const v1::StepRange& range : w.ranges()) r.ranges[r.range_count++] = {range.start(), range.end()};
  for (const v1::RuleTensor& t : w.tensors()) {
    const std::optional<GemmRole> g = from_wire(t.gemm());
    const std::optional<Operand> o = from_wire(t.operand());
    if (!g || *g == GemmRole::kUnknown || !o) return fail("tensors: expected fprop, dgrad or wgrad and x, w, dy or out");
    r.tensors |= tensor_bit(*g, *o);
  }
  for (const auto& [text, target] : {std::pair{&w.layer_regex(), &r.layer_regex}, std::pair{&w.and_layer_regex(), &r.and_layer_regex}}) {
    if (text->size() >= kMaxRuleLayerRegexBytes || text->find('\0') != std::string::npos) {
      return fail("layer patterns: at most " + std::to_string(kMaxRuleLayerRegexBytes - 1) + " bytes, no NUL");
    }
    std::memcpy(*target, text->data(), text->size());
  }
  r.group = w.group();
  if (const std::string problem = rule_problem(r); !problem.empty()) return fail(problem);
  return r;
}

void add_logged_stats(v1::Policy& policy, const SamplingRule& rule, const std::string& feature, Operand operand,
                      const std::vector<std::string>& stats) {
  v1::LoggedStats* logged = policy.add_te_logged();
  *logged->mutable_rule() = to_wire(rule);
  logged->set_feature(feature);
  logged->set_operand(to_wire(operand));
  for (const std::string& s : stats) logged->add_stats(s);
}

std::uint32_t required_protocol(const v1::TensorHeader& h) {
  const bool block_mode = h.scale_mode() != v1::SCALE_MODE_UNSPECIFIED && h.scale_mode() != to_wire(ScaleLayout::kNone) &&
                          h.scale_mode() != to_wire(ScaleLayout::kTensorScalar);
  const bool protocol_2 = h.dtype() == to_wire(DType::kE2M1) || h.scale_bytes() != 0 || block_mode;
  const bool protocol_3 = h.has_expert() || h.experts() != 0 || h.expert_tokens_size() != 0 || h.valid_rows() != 0;
  return h.has_cast() ? 4 : protocol_3 ? 3 : protocol_2 ? 2 : 1;
}

void strip_cast(v1::TensorHeader& h) {
  if (!h.has_cast()) return;
  h.set_payload_bytes(h.payload_bytes() - std::min(h.payload_bytes(), h.cast().bytes()));
  h.clear_cast();
}

void fold_expert_into_layer(v1::TensorHeader& h) {
  if (h.has_expert()) h.set_layer(h.layer() + ".expert" + std::to_string(h.expert()));
  h.clear_expert();
  h.clear_experts();
  h.clear_expert_tokens();
  h.clear_valid_rows();
}

}  // namespace fp8scope::wire
