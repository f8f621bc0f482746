#include "fp8scope/hook/layer_names.h"

namespace fp8scope::hook {
namespace {

struct SuffixRow {
  std::string_view text;
  RoleSuffix suffix;
};
constexpr SuffixRow kSuffixes[] = {{"/fprop", RoleSuffix::kFprop},     {"/dgrad", RoleSuffix::kDgrad},
                                   {"/wgrad", RoleSuffix::kWgrad},     {"/forward", RoleSuffix::kForward},
                                   {"/backward", RoleSuffix::kBackward}};

// Printable ASCII, room left for "#<ordinal>".
std::string label_text(std::string_view name) {
  std::string out(name.substr(0, kMaxLayerLabelBytes - 12));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '_';
  }
  return out.empty() ? std::string("unnamed") : out;
}

}  // namespace

// "...experts.N" / "...expert.N": the layer before ".N" and N (up to 2^31; a longer number is no
// expert index).
std::int64_t split_expert(std::string_view& layer) {
  const std::size_t dot = layer.rfind('.');
  if (dot == std::string_view::npos || dot + 1 >= layer.size() || layer.size() - dot - 1 > 9) return -1;
  const std::string_view digits = layer.substr(dot + 1), head = layer.substr(0, dot);
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
  }
  if (!head.ends_with("experts") && !head.ends_with("expert")) return -1;
  std::int64_t n = 0;
  for (char c : digits) n = n * 10 + (c - '0');
  layer = head;
  return n;
}

RangeName parse_range_name(std::string_view name) {
  RangeName out{name, RoleSuffix::kNone, -1};
  for (const SuffixRow& row : kSuffixes) {
    if (name.size() > row.text.size() && name.substr(name.size() - row.text.size()) == row.text) {
      out = {name.substr(0, name.size() - row.text.size()), row.suffix, -1};
      break;
    }
  }
  out.expert = split_expert(out.layer);
  return out;
}

GemmRole resolve_role(GemmRole layout_role, RoleSuffix suffix) {
  switch (suffix) {
    case RoleSuffix::kFprop: return GemmRole::kFprop;
    case RoleSuffix::kDgrad: return GemmRole::kDgrad;
    case RoleSuffix::kWgrad: return GemmRole::kWgrad;
    case RoleSuffix::kForward: return GemmRole::kFprop;
    case RoleSuffix::kBackward:
      return layout_role == GemmRole::kDgrad || layout_role == GemmRole::kWgrad ? layout_role : GemmRole::kUnknown;
    case RoleSuffix::kNone: return layout_role;
  }
  return layout_role;
}

void RangeStack::push(std::string_view name, const void* domain, bool step_marker) {
  const RangeName parsed = parse_range_name(name);
  entries_.push_back({label_text(parsed.layer), parsed.suffix, domain, step_marker, parsed.expert, {0, 0, 0, 0, 0}, {}});
}

void RangeStack::declare_tokens(std::vector<std::uint64_t> tokens) {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->step_marker) continue;
    it->tokens = std::move(tokens);
    return;
  }
}

void RangeStack::pop(const void* domain) {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->domain == domain) {
      entries_.erase(std::next(it).base());
      return;
    }
  }
}

GemmName RangeStack::name_next_gemm(GemmRole layout_role, std::uint64_t step, bool grouped) {
  if (step != step_) {
    step_ = step;
    step_ordinal_ = 0;
  }
  const std::uint32_t in_step = step_ordinal_++;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->step_marker) continue;
    const GemmRole role = resolve_role(layout_role, it->suffix);
    std::uint32_t ordinal = it->ordinals[static_cast<std::uint32_t>(role)]++;
    GemmName name{"", role, explicit_expert_ >= 0 ? explicit_expert_ : it->expert, it->tokens};
    // Declared tokens: the GEMMs of a role run one per expert with tokens, in index order.
    std::vector<std::uint32_t> with_tokens;
    for (std::size_t e = 0; e < it->tokens.size(); ++e) {
      if (it->tokens[e] > 0) with_tokens.push_back(static_cast<std::uint32_t>(e));
    }
    if (!with_tokens.empty() && name.expert < 0 && !grouped) {
      name.expert = with_tokens[ordinal % with_tokens.size()];
      ordinal /= static_cast<std::uint32_t>(with_tokens.size());
    }
    name.layer = it->layer + "#" + std::to_string(ordinal);
    return name;
  }
  return {"gemm#" + std::to_string(in_step), layout_role, explicit_expert_, {}};
}

RangeStack& thread_ranges() {
  static thread_local RangeStack stack;
  return stack;
}

}  // namespace fp8scope::hook
