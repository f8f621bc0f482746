// Layer labels for intercepted GEMMs. Each thread keeps the stack of ranges it is inside (NVTX
// ranges through the injection, fp8scope_range_push): a GEMM is named by the innermost range plus
// its ordinal among the GEMMs of the same role inside that range, "blocks.0.mlp.fc1#0"; outside
// any range, by its ordinal within the step, "gemm#7". A range name may end in a role suffix
// ("/fprop", "/dgrad", "/wgrad", or "/forward", "/backward") that wins over the layout's role.
//
// Experts of a mixture-of-experts layer keep their index, never an ordinal that shifts when an
// expert gets no tokens: a range named "...experts.N" (or "expert.N") is expert N of the layer
// "...experts"; fp8scope_set_expert() names it explicitly; and after fp8scope_expert_tokens() in a
// range, the GEMMs of each role there are the experts with tokens, in index order (TE's
// GroupedLinear runs one GEMM per such expert), while a grouped GEMM there learns how many of each
// group's rows are tokens (the rest is padding).
//
// A module that runs several GEMMs can declare them in the order it runs them
// (fp8scope_range_gemms), as the Python helper does for Transformer Engine's modules: TE names
// LayerNormMLP's GEMMs "<module>.fc1" and "<module>.fc2" (pytorch/module/layernorm_mlp.py:2653-2666)
// and runs fc1 then fc2 forward, fc2's dgrad and wgrad then fc1's backward (:587, 694, 1245, 1400,
// 1550, 1678). The i-th GEMM of such a range is then its declared GEMM, "mlp.fc2#0", with its role.
//
// Transformer Engine's own NVTX ranges (pushed when NVTE_NVTX_ENABLED=1) name no layer: a module
// range ("LayerNormMLP forward", "_Linear_backward": pytorch/module/base.py:1638, 1959) is passed
// over, and a GEMM range ("transformer_engine._Linear.backward.dgrad_gemm": linear.py:535, 1075,
// 1284) only gives its GEMMs their role, which a TN layout cannot.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/hook/gemm_operands.h"

namespace fp8scope::hook {

enum class RoleSuffix { kNone, kFprop, kDgrad, kWgrad, kForward, kBackward };

struct RangeName {
  std::string_view layer;  // the name without its suffix (and without ".N" after "experts")
  RoleSuffix suffix = RoleSuffix::kNone;
  std::int64_t expert = -1;
  bool names_no_layer = false;  // one of Transformer Engine's own ranges; `suffix` is its GEMMs' role
};
RangeName parse_range_name(std::string_view name);

// The role a GEMM with this layout has inside a range with this suffix. In a backward range a TN
// GEMM (as FP8 GEMMs on Hopper all are) cannot be told apart: unknown.
GemmRole resolve_role(GemmRole layout_role, RoleSuffix suffix);

// Label values are printable ASCII of bounded length (the daemon refuses anything else).
inline constexpr std::size_t kMaxLayerLabelBytes = 200;

struct GemmName {
  std::string layer;
  GemmRole role = GemmRole::kUnknown;
  std::int64_t expert = -1;  // a single GEMM's expert, when a name or the C API gives it
  std::vector<std::uint64_t> declared_tokens;  // fp8scope_expert_tokens() of the range, per expert
};

// A GEMM a module declares: its name inside the module ("fc1"; "" for the module's own) and role.
struct DeclaredGemm {
  std::string name;
  GemmRole role = GemmRole::kUnknown;
  bool operator==(const DeclaredGemm&) const = default;
};
inline constexpr std::size_t kMaxDeclaredGemms = 16;
inline constexpr std::size_t kMaxDeclaredGemmName = 24;
// "fc1/fprop fc2/fprop" (items separated by spaces, each "[name]/role"); nothing when malformed.
std::optional<std::vector<DeclaredGemm>> parse_declared_gemms(std::string_view text);

class RangeStack {
 public:
  // `step_marker`: the range that marks a training step (FP8SCOPE_STEP_RANGE) names nothing.
  void push(std::string_view name, const void* domain, bool step_marker = false);
  // Pops the innermost range of `domain`; a pop without a push is ignored.
  void pop(const void* domain);
  std::size_t depth() const { return entries_.size(); }

  // Names the next GEMM on this thread, and counts it. A batched or grouped GEMM (`grouped`) holds
  // every expert at once: it takes no expert from the declared tokens.
  GemmName name_next_gemm(GemmRole layout_role, std::uint64_t step, bool grouped = false);

  // fp8scope_set_expert: the thread's GEMMs are this expert's until set again (-1: none).
  void set_expert(std::int64_t expert) { explicit_expert_ = expert; }
  // fp8scope_expert_tokens: tokens routed to each expert, for the GEMMs of the innermost range.
  void declare_tokens(std::vector<std::uint64_t> tokens);
  // fp8scope_range_gemms: the GEMMs the innermost range runs, in order, again and again.
  void declare_gemms(std::vector<DeclaredGemm> gemms);

 private:
  struct Entry {
    std::string layer;
    RoleSuffix suffix;
    const void* domain;
    bool step_marker;
    bool names_no_layer;
    std::int64_t expert;
    std::uint32_t ordinals[5];  // by GemmRole value
    std::vector<std::uint64_t> tokens;  // declared
    std::vector<DeclaredGemm> gemms;    // declared
    std::uint64_t next_gemm = 0;        // of `gemms`, counted across repeats
  };
  // The range's declared GEMM for the next one, whose role (layout or range) is `role`; nothing
  // when that role is not among them.
  std::optional<GemmName> declared_name(Entry& e, GemmRole role);
  std::vector<Entry> entries_;
  std::int64_t explicit_expert_ = -1;
  std::uint64_t step_ = ~0ull;
  std::uint32_t step_ordinal_ = 0;
};

// This thread's stack.
RangeStack& thread_ranges();

}  // namespace fp8scope::hook
