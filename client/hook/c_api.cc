// The public C API (include/fp8scope/hook.h). Each function returns at once; bad arguments are
// ignored, never reported by failing the caller.
#include "fp8scope/hook.h"

#include <cstring>
#include <vector>

#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/hook_runtime.h"
#include "fp8scope/hook/layer_names.h"

namespace {

constexpr std::uint32_t kMaxDeclaredExperts = 65536;
constexpr std::size_t kMaxSequenceBytes = 1024;

bool valid_scalar_name(const char* name) {
  if (name == nullptr) return false;
  const std::size_t n = std::strlen(name);
  if (n == 0 || n > 63) return false;
  for (std::size_t i = 0; i < n; ++i) {
    if (name[i] < 0x21 || name[i] > 0x7e) return false;
  }
  return true;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) uint32_t fp8scope_hook_api_version(void) { return FP8SCOPE_HOOK_API_VERSION; }

__attribute__((visibility("default"))) void fp8scope_step(uint64_t step) {
  if (fp8scope::hook::HookRuntime* hook = fp8scope::hook::HookRuntime::get()) hook->step(step);
}

__attribute__((visibility("default"))) void fp8scope_log_scalar(const char* name, uint64_t step, double value) {
  if (!valid_scalar_name(name)) return;
  if (fp8scope::hook::HookRuntime* hook = fp8scope::hook::HookRuntime::get()) hook->scalar(name, step, value);
}

__attribute__((visibility("default"))) void fp8scope_range_push(const char* name) {
  if (fp8scope::hook::g_passthrough.load(std::memory_order_relaxed)) return;
  fp8scope::hook::thread_ranges().push(name == nullptr ? "" : name, nullptr);
}

__attribute__((visibility("default"))) void fp8scope_range_pop(void) {
  if (fp8scope::hook::g_passthrough.load(std::memory_order_relaxed)) return;
  fp8scope::hook::thread_ranges().pop(nullptr);
}

__attribute__((visibility("default"))) void fp8scope_set_expert(int32_t expert) {
  if (fp8scope::hook::g_passthrough.load(std::memory_order_relaxed)) return;
  fp8scope::hook::thread_ranges().set_expert(expert < 0 ? -1 : expert);
}

__attribute__((visibility("default"))) void fp8scope_expert_tokens(const uint64_t* tokens, uint32_t experts) {
  if (fp8scope::hook::g_passthrough.load(std::memory_order_relaxed)) return;
  if (tokens == nullptr || experts == 0 || experts > kMaxDeclaredExperts) return;
  fp8scope::hook::thread_ranges().declare_tokens(std::vector<std::uint64_t>(tokens, tokens + experts));
}

__attribute__((visibility("default"))) void fp8scope_range_gemms(const char* sequence) {
  if (fp8scope::hook::g_passthrough.load(std::memory_order_relaxed) || sequence == nullptr) return;
  const std::size_t n = strnlen(sequence, kMaxSequenceBytes + 1);
  if (n > kMaxSequenceBytes) return;
  if (auto gemms = fp8scope::hook::parse_declared_gemms(std::string_view(sequence, n))) {
    fp8scope::hook::thread_ranges().declare_gemms(*std::move(gemms));
  }
}

}  // extern "C"
