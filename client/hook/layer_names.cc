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

RangeName parse_range_name(std::string_view name) {
  for (const SuffixRow& row : kSuffixes) {
    if (name.size() > row.text.size() && name.substr(name.size() - row.text.size()) == row.text) {
      return {name.substr(0, name.size() - row.text.size()), row.suffix};
    }
  }
  return {name, RoleSuffix::kNone};
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
  entries_.push_back({label_text(parsed.layer), parsed.suffix, domain, step_marker, {0, 0, 0, 0, 0}});
}

void RangeStack::pop(const void* domain) {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->domain == domain) {
      entries_.erase(std::next(it).base());
      return;
    }
  }
}

GemmName RangeStack::name_next_gemm(GemmRole layout_role, std::uint64_t step) {
  if (step != step_) {
    step_ = step;
    step_ordinal_ = 0;
  }
  const std::uint32_t in_step = step_ordinal_++;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->step_marker) continue;
    const GemmRole role = resolve_role(layout_role, it->suffix);
    const std::uint32_t ordinal = it->ordinals[static_cast<std::uint32_t>(role)]++;
    return {it->layer + "#" + std::to_string(ordinal), role};
  }
  return {"gemm#" + std::to_string(in_step), layout_role};
}

RangeStack& thread_ranges() {
  static thread_local RangeStack stack;
  return stack;
}

}  // namespace fp8scope::hook
