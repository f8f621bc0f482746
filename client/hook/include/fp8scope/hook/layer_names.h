// Layer labels for intercepted GEMMs. Each thread keeps the stack of ranges it is inside (NVTX
// ranges through the injection, fp8scope_range_push): a GEMM is named by the innermost range plus
// its ordinal among the GEMMs of the same role inside that range, "blocks.0.mlp.fc1#0"; outside
// any range, by its ordinal within the step, "gemm#7". A range name may end in a role suffix
// ("/fprop", "/dgrad", "/wgrad", or "/forward", "/backward") that wins over the layout's role.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/hook/gemm_operands.h"

namespace fp8scope::hook {

enum class RoleSuffix { kNone, kFprop, kDgrad, kWgrad, kForward, kBackward };

struct RangeName {
  std::string_view layer;  // the name without its suffix
  RoleSuffix suffix = RoleSuffix::kNone;
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
};

class RangeStack {
 public:
  // `step_marker`: the range that marks a training step (FP8SCOPE_STEP_RANGE) names nothing.
  void push(std::string_view name, const void* domain, bool step_marker = false);
  // Pops the innermost range of `domain`; a pop without a push is ignored.
  void pop(const void* domain);
  std::size_t depth() const { return entries_.size(); }

  // Names the next GEMM on this thread, and counts it.
  GemmName name_next_gemm(GemmRole layout_role, std::uint64_t step);

 private:
  struct Entry {
    std::string layer;
    RoleSuffix suffix;
    const void* domain;
    bool step_marker;
    std::uint32_t ordinals[5];  // by GemmRole value
  };
  std::vector<Entry> entries_;
  std::uint64_t step_ = ~0ull;
  std::uint32_t step_ordinal_ = 0;
};

// This thread's stack.
RangeStack& thread_ranges();

}  // namespace fp8scope::hook
