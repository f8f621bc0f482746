// Whether a GEMM operand is sampled: the daemon's policy as the shipper last wrote it into the
// shared segment, or until one arrives, the policy FP8SCOPE_EVERY / _START_STEP / _END_STEP /
// _LAYER_REGEX / _OPERANDS / _BYTES_PER_STEP give (`fp8scope run` sets them), else the default.
// The per-GEMM step check is lock-free; the rest runs on the sampled path only.
#pragma once

#include <atomic>
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
shm::PolicyCopy policy_from_environment();

class Sampler {
 public:
  explicit Sampler(const shm::PolicyCopy& initial);

  // Every GEMM: adopts a newer policy from the segment (one atomic load when unchanged), then
  // whether `step` is sampled.
  bool step_selected(const shm::Header* segment, std::uint64_t step);

  bool layer_selected(const std::string& layer);
  bool operand_selected(Operand operand) const;
  // Charges `bytes` to the step's budget; false (and nothing charged) when it would overrun it.
  bool charge(std::uint64_t step, std::uint64_t bytes);
  // The experts of a batched or grouped GEMM to sample this call: all, or experts_per_call of them
  // starting where this layer's previous call stopped, so each is seen in turn.
  std::vector<std::uint32_t> experts_for_call(const std::string& layer, std::uint32_t experts);

 private:
  void adopt(const shm::PolicyCopy& p);

  std::atomic<std::uint64_t> seen_seq_{0};
  std::atomic<std::uint64_t> every_{0}, start_{0}, end_{0};
  std::atomic<std::uint32_t> operand_mask_{0};

  std::mutex mu_;  // below: the sampled path and policy changes
  std::uint64_t max_bytes_per_step_ = 0;
  std::optional<LayerPattern> layer_pattern_;  // none: every layer
  std::unordered_map<std::string, bool> layer_cache_;
  std::uint64_t budget_step_ = ~0ull, budget_used_ = 0;
  std::uint32_t experts_per_call_ = 0;
  std::unordered_map<std::string, std::uint32_t> next_expert_;  // by layer, bounded like layer_cache_
};

}  // namespace fp8scope::hook
