// The training step each GEMM belongs to, from the best source the process offers: the C API
// (fp8scope_step), else an NVTX range named by FP8SCOPE_STEP_RANGE, else the repeat of the first
// GEMM's signature (a step's first GEMM comes back when the next step starts). Lock-free: the
// unsampled path reads one atomic, plus the signature when that is the source.
#pragma once

#include <atomic>
#include <cstdint>

namespace fp8scope::hook {

class StepClock {
 public:
  enum class Source : int { kSignature = 0, kNvtxRange = 1, kApi = 2 };

  // fp8scope_step(n): from now on the API is the only source.
  void set_from_api(std::uint64_t step);
  // The step range was pushed: the next step begins (unless the API took over).
  void advance_from_range();

  Source source() const { return static_cast<Source>(source_.load(std::memory_order_relaxed)); }
  bool needs_signature() const { return source() == Source::kSignature; }

  // The step of a GEMM. `signature` is only read when needs_signature().
  std::uint64_t on_gemm(std::uint64_t signature);

  std::uint64_t current() const { return step_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int> source_{static_cast<int>(Source::kSignature)};
  std::atomic<std::uint64_t> step_{0};
  std::atomic<std::uint64_t> first_signature_{0};
  std::atomic<bool> range_seen_{false};
};

// A GEMM's identity across steps: its A operand's address and shape (weights keep their address).
std::uint64_t gemm_signature(const void* a, std::uint64_t rows, std::uint64_t cols, bool transa, bool transb);

}  // namespace fp8scope::hook
