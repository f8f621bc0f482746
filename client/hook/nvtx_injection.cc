// NVTX v3 injection (the protocol of nvtx3/nvtxDetail/nvtxInit.h): NVTX calls
// InitializeInjectionNvtx2 in the library NVTX_INJECTION64_PATH names (the hook points it at itself
// when unset), and we fill in the range push/pop slots of the core and domain tables, so every
// thread's range stack is known. Ranges of all domains share the thread's stack; a pop removes the
// innermost range of its own domain. Registered strings are interned here so ranges named by them
// are readable too. The step range (FP8SCOPE_STEP_RANGE) advances the step clock.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <cwchar>
#include <mutex>
#include <string>
#include <unordered_set>

#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/hook_runtime.h"
#include "fp8scope/hook/layer_names.h"

namespace fp8scope::hook {
namespace {

// Interned strings for nvtxDomainRegisterStringA/W; their addresses are the handles.
std::mutex g_strings_mu;
std::unordered_set<std::string>& strings() {
  static auto* s = new std::unordered_set<std::string>;  // immortal, like the handles given out
  return *s;
}

nvtxStringHandle_t intern(std::string text) {
  std::lock_guard<std::mutex> lock(g_strings_mu);
  return reinterpret_cast<nvtxStringHandle_t>(const_cast<std::string*>(&*strings().insert(std::move(text)).first));
}

std::string narrow(const wchar_t* w) {
  std::string out;
  for (; w != nullptr && *w != L'\0' && out.size() < kMaxLayerLabelBytes; ++w) {
    out.push_back(*w >= 0x20 && *w < 0x7f ? static_cast<char>(*w) : '_');
  }
  return out;
}

std::string message_of(const nvtxEventAttributes_t* a) {
  if (a == nullptr) return {};
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return a->message.ascii == nullptr ? std::string() : std::string(a->message.ascii);
    case NVTX_MESSAGE_TYPE_UNICODE: return narrow(a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered == nullptr ? std::string() : *reinterpret_cast<const std::string*>(a->message.registered);
    default: return {};
  }
}

int push(const std::string& name, const void* domain) {
  if (g_passthrough.load(std::memory_order_relaxed)) return 0;
  const std::string& step_range = configured_step_range();
  const bool step_marker = !step_range.empty() && name == step_range;
  RangeStack& ranges = thread_ranges();
  ranges.push(name, domain, step_marker);
  if (step_marker) {
    if (HookRuntime* hook = HookRuntime::existing()) hook->clock().advance_from_range();
  }
  return static_cast<int>(ranges.depth()) - 1;
}

int pop(const void* domain) {
  if (g_passthrough.load(std::memory_order_relaxed)) return 0;
  RangeStack& ranges = thread_ranges();
  ranges.pop(domain);
  return static_cast<int>(ranges.depth());
}

int NVTX_API range_push_a(const char* message) { return push(message == nullptr ? "" : message, nullptr); }
int NVTX_API range_push_w(const wchar_t* message) { return push(narrow(message), nullptr); }
int NVTX_API range_push_ex(const nvtxEventAttributes_t* a) { return push(message_of(a), nullptr); }
int NVTX_API range_pop() { return pop(nullptr); }
int NVTX_API domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { return push(message_of(a), d); }
int NVTX_API domain_range_pop(nvtxDomainHandle_t d) { return pop(d); }
nvtxStringHandle_t NVTX_API register_string_a(nvtxDomainHandle_t, const char* s) { return intern(s == nullptr ? "" : s); }
nvtxStringHandle_t NVTX_API register_string_w(nvtxDomainHandle_t, const wchar_t* s) { return intern(narrow(s)); }

template <class F>
void install(NvtxFunctionTable table, unsigned int size, unsigned int slot, F function) {
  if (table != nullptr && slot < size && table[slot] != nullptr) *table[slot] = reinterpret_cast<NvtxFunctionPointer>(function);
}

}  // namespace
}  // namespace fp8scope::hook

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  using namespace fp8scope::hook;
  if (get_export_table == nullptr) return 0;
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->GetModuleFunctionTable == nullptr) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned int core_size = 0, core2_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) == 0) return 0;
  install(core, core_size, NVTX_CBID_CORE_RangePushA, &range_push_a);
  install(core, core_size, NVTX_CBID_CORE_RangePushW, &range_push_w);
  install(core, core_size, NVTX_CBID_CORE_RangePushEx, &range_push_ex);
  install(core, core_size, NVTX_CBID_CORE_RangePop, &range_pop);
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size) != 0) {
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, &domain_range_push_ex);
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, &domain_range_pop);
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, &register_string_a);
    install(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringW, &register_string_w);
  }
  return 1;
}
