#include "fp8scope/hook/layer_names.h"

#include <algorithm>

namespace fp8scope::hook {
namespace {

struct SuffixRow {
  std::string_view text;
  RoleSuffix suffix;
};
constexpr SuffixRow kSuffixes[] = {{"/fprop", RoleSuffix::kFprop},     {"/dgrad", RoleSuffix::kDgrad},
                                   {"/wgrad", RoleSuffix::kWgrad},     {"/forward", RoleSuffix::kForward},
                                   {"/backward", RoleSuffix::kBackward}};

// Transformer Engine's module classes with a range of their own (pytorch/module/base.py:1638, 1959).
constexpr std::string_view kTeModules[] = {"Linear", "LayerNormLinear", "LayerNormMLP", "GroupedLinear"};
// The GEMM ranges of TE's Linear and LayerNormLinear, by how their names end (linear.py:535, 1075,
// 1284; layernorm_linear.py:409, 851, 1062).
constexpr SuffixRow kTeGemmRanges[] = {
    {".dgrad_gemm", RoleSuffix::kDgrad}, {".wgrad_gemm", RoleSuffix::kWgrad}, {".gemm", RoleSuffix::kFprop}};

// One of TE's own ranges: nothing when it is not, else the role it gives its GEMMs.
std::optional<RoleSuffix> te_range(std::string_view name) {
  if (name.starts_with("transformer_engine.")) {
    for (const SuffixRow& row : kTeGemmRanges) {
      if (name.ends_with(row.text)) return row.suffix;
    }
    return RoleSuffix::kNone;
  }
  for (std::string_view module : kTeModules) {
    if (name.size() == module.size() + 8 && name.starts_with(module) && name.ends_with(" forward")) return RoleSuffix::kForward;
    if (name.size() < module.size() + 2 || name[0] != '_' || name.substr(1, module.size()) != module) continue;
    const std::string_view rest = name.substr(module.size() + 1);
    if (rest == "_backward") return RoleSuffix::kNone;
    if (rest == "_wgrad") return RoleSuffix::kWgrad;
  }
  return std::nullopt;
}

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
  if (const std::optional<RoleSuffix> te = te_range(name)) return {name, *te, -1, true};
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
  entries_.push_back(
      {label_text(parsed.layer), parsed.suffix, domain, step_marker, parsed.names_no_layer, parsed.expert, {0, 0, 0, 0, 0}, {}, {}});
}

std::optional<std::vector<DeclaredGemm>> parse_declared_gemms(std::string_view text) {
  std::vector<DeclaredGemm> out;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view item = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (item.empty()) continue;
    const std::size_t slash = item.find('/');
    if (slash == std::string_view::npos || slash > kMaxDeclaredGemmName || out.size() == kMaxDeclaredGemms) return std::nullopt;
    const std::string_view name = item.substr(0, slash);
    const GemmRole role = gemm_from_name(item.substr(slash + 1)).value_or(GemmRole::kUnknown);
    const bool printable = std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f && c != '#'; });
    if (role == GemmRole::kUnknown || !printable) return std::nullopt;
    out.push_back({std::string(name), role});
  }
  if (out.empty()) return std::nullopt;
  return out;
}

void RangeStack::declare_gemms(std::vector<DeclaredGemm> gemms) {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->step_marker || it->names_no_layer) continue;
    it->gemms = std::move(gemms);
    it->next_gemm = 0;
    return;
  }
}

std::optional<GemmName> RangeStack::declared_name(Entry& e, GemmRole role) {
  const std::size_t n = e.gemms.size();
  std::uint64_t at = e.next_gemm;
  // A GEMM whose role is known takes the next declared one of that role, so a module that skips
  // one (no dgrad for an input without a gradient) stays in step.
  if (role != GemmRole::kUnknown) {
    std::size_t k = 0;
    while (k < n && e.gemms[(at + k) % n].role != role) ++k;
    if (k == n) return std::nullopt;
    at += k;
  }
  const DeclaredGemm& g = e.gemms[at % n];
  e.next_gemm = at + 1;
  const std::string inside = g.name.empty() ? "" : "." + g.name;
  const std::string layer = e.layer.substr(0, kMaxLayerLabelBytes - 12 - inside.size());
  return GemmName{layer + inside + "#" + std::to_string(at / n), role == GemmRole::kUnknown ? g.role : role,
                  explicit_expert_ >= 0 ? explicit_expert_ : e.expert, {}};
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
  RoleSuffix te_role = RoleSuffix::kNone;  // from the innermost of TE's ranges that gives one
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->names_no_layer && te_role == RoleSuffix::kNone) te_role = it->suffix;
    if (it->step_marker || it->names_no_layer) continue;
    GemmRole role = resolve_role(layout_role, it->suffix);
    if (te_role != RoleSuffix::kNone) role = resolve_role(role, te_role);
    if (!it->gemms.empty()) {
      if (std::optional<GemmName> declared = declared_name(*it, role)) return *std::move(declared);
    }
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
  const GemmRole role = te_role != RoleSuffix::kNone ? resolve_role(layout_role, te_role) : layout_role;
  return {"gemm#" + std::to_string(in_step), role, explicit_expert_, {}};
}

RangeStack& thread_ranges() {
  static thread_local RangeStack stack;
  return stack;
}

}  // namespace fp8scope::hook
