// Whether a GEMM operand is sampled: the daemon's policy as the shipper last wrote it into the
// shared segment, or until one arrives, the policy FP8SCOPE_EVERY / _START_STEP / _END_STEP /
// _LAYER_REGEX / _OPERANDS / _BYTES_PER_STEP / _RULES give (`fp8scope run` sets them), else the
// default.
// The per-GEMM step check is lock-free; the rest runs on the sampled path only.
#pragma once

#include <atomic>
#include <memory>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/shm/shm_ring.h"
#include "fp8scope/hook/gemm_operands.h"

namespace fp8scope::hook {

// The policy the environment gives; a malformed variable is reported on stderr once and ignored.
// FP8SCOPE_RULES (wire/sampling_rule.h's text) replaces the selection variables.
shm::PolicyCopy policy_from_environment();

// The operands of a layer's GEMMs a step samples: a bit per (role, operand), unknown roles included.
class TensorSelection {
 public:
  static TensorSelection all() { return TensorSelection(~0u); }
  static TensorSelection of_operands(std::uint32_t operand_mask);  // bit (1 << Operand); 0 = by default
  static TensorSelection of_tensors(std::uint32_t tensors);  // SamplingRule::tensors
  TensorSelection() = default;
  bool none() const { return bits_ == 0; }
  bool takes(GemmRole gemm, Operand operand) const { return (bits_ & tensor_bit(gemm, operand)) != 0; }
  TensorSelection& operator|=(TensorSelection other) {
    bits_ |= other.bits_;
    return *this;
  }

 private:
  explicit TensorSelection(std::uint32_t bits) : bits_(bits) {}
  std::uint32_t bits_ = 0;
};

class Sampler {
 public:
  explicit Sampler(const shm::PolicyCopy& initial);

  // Every GEMM: adopts a newer policy from the segment (one atomic load when unchanged), then
  // whether `step` is sampled.
  bool step_selected(const shm::Header* segment, std::uint64_t step);

  // The operands of this layer's GEMMs that `step` (already step_selected) samples; none when the
  // layer is not sampled. `conflict`: set when rules of two groups select the layer (then none).
  TensorSelection select(std::uint64_t step, const std::string& layer, bool* conflict = nullptr);
  // The operands of this layer's GEMMs that some step may sample under the current policy: what a
  // CUDA graph records at capture (graph_recorder.h).
  TensorSelection selectable(const std::string& layer, bool* conflict = nullptr);
  // Charges `bytes` to the step's budget; false (and nothing charged) when it would overrun it.
  bool charge(std::uint64_t step, std::uint64_t bytes);
  // The experts of a batched or grouped GEMM to sample this call: all, or experts_per_call of them
  // starting where this layer's previous call stopped, so each is seen in turn.
  std::vector<std::uint32_t> experts_for_call(const std::string& layer, std::uint32_t experts);
  // How many experts_for_call picks of `experts` under the current policy.
  std::uint32_t experts_per_call(std::uint32_t experts);

 private:
  void adopt(const shm::PolicyCopy& p);
  // select() for `step`, or with no step, for any.
  TensorSelection selection(const std::string& layer, bool* conflict, const std::uint64_t* step);
  bool step_of_rules(std::uint64_t step);
  bool layer_matches(const std::string& layer);  // under mu_: the policy's own pattern
  // Under mu_: a bit per rule whose patterns match, or kConflict when rules of two groups do.
  std::uint32_t rules_of_layer(const std::string& layer);
  static constexpr std::uint32_t kConflict = 1u << 31;

  std::atomic<std::uint64_t> seen_seq_{0};
  std::atomic<std::uint64_t> every_{0}, start_{0}, end_{0};
  std::atomic<std::uint32_t> operand_mask_{0};
  std::atomic<bool> has_rules_{false};
  // With rules: the last step asked, (step << 1 | sampled) + 1; 0 = none yet. One lock a step,
  // not one a GEMM.
  std::atomic<std::uint64_t> rule_step_{0};

  std::mutex mu_;  // below: the sampled path and policy changes
  std::uint64_t max_bytes_per_step_ = 0;
  std::optional<LayerPattern> layer_pattern_;  // none: every layer
  struct CompiledRule {
    SamplingRule rule;
    std::optional<LayerPattern> pattern, and_pattern;  // none: every layer
  };
  std::unique_ptr<shm::PolicyCopy> incoming_;  // the segment's policy is read here, not on a stack
  std::vector<CompiledRule> rules_;
  std::unordered_map<std::string, std::uint32_t> layer_cache_;  // bool, or a bit per rule
  std::uint64_t budget_step_ = ~0ull, budget_used_ = 0;
  std::uint32_t experts_per_call_ = 0;
  std::unordered_map<std::string, std::uint32_t> next_expert_;  // by layer, bounded like layer_cache_
};

}  // namespace fp8scope::hook
