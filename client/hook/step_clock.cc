#include "fp8scope/hook/step_clock.h"

namespace fp8scope::hook {

void StepClock::set_from_api(std::uint64_t step) {
  source_.store(static_cast<int>(Source::kApi), std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
}

void StepClock::advance_from_range() {
  int expected = static_cast<int>(Source::kSignature);
  source_.compare_exchange_strong(expected, static_cast<int>(Source::kNvtxRange), std::memory_order_relaxed);
  if (source() != Source::kNvtxRange) return;
  // The first step range opens step 0; each later one the next step.
  if (range_seen_.exchange(true, std::memory_order_relaxed)) step_.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t StepClock::on_gemm(std::uint64_t signature) {
  if (!needs_signature()) return step_.load(std::memory_order_relaxed);
  if (signature == 0) signature = 1;  // 0 means "not seen yet"
  std::uint64_t first = 0;
  if (first_signature_.compare_exchange_strong(first, signature, std::memory_order_relaxed)) {
    return step_.load(std::memory_order_relaxed);
  }
  if (first == signature) return step_.fetch_add(1, std::memory_order_relaxed) + 1;
  return step_.load(std::memory_order_relaxed);
}

std::uint64_t gemm_signature(const void* a, std::uint64_t rows, std::uint64_t cols, bool transa, bool transb) {
  // FNV-1a over the fields: cheap and good enough to tell GEMMs apart.
  std::uint64_t h = 1469598103934665603ull;
  const std::uint64_t fields[] = {reinterpret_cast<std::uint64_t>(a), rows, cols, (transa ? 2u : 0u) | (transb ? 1u : 0u)};
  for (std::uint64_t f : fields) {
    for (int i = 0; i < 8; ++i) {
      h ^= (f >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace fp8scope::hook
