// Load and unload. On load: point NVTX at ourselves when nothing else is injected (so ranges reach
// the hook), and disable the hook in children forked without exec (they share our ring mapping but
// not our threads; an exec'd child loads a fresh hook through LD_PRELOAD). On unload or exit:
// stop observing.
#include <dlfcn.h>
#include <pthread.h>

#include <cstdlib>
#include <cstring>

#include "fp8scope/hook/call_guard.h"

namespace {

void disable_in_forked_child() { fp8scope::hook::g_passthrough.store(true, std::memory_order_relaxed); }

__attribute__((constructor)) void on_load() {
  const char* disable = std::getenv("FP8SCOPE_DISABLE");
  if (disable != nullptr && std::strcmp(disable, "1") == 0) {
    fp8scope::hook::g_passthrough.store(true, std::memory_order_relaxed);
    return;
  }
  pthread_atfork(nullptr, nullptr, &disable_in_forked_child);
  const char* injection = std::getenv("NVTX_INJECTION64_PATH");
  Dl_info self{};  // our own file, found from any function of ours
  if ((injection == nullptr || *injection == '\0') &&
      dladdr(reinterpret_cast<void*>(&disable_in_forked_child), &self) != 0 && self.dli_fname != nullptr) {
    setenv("NVTX_INJECTION64_PATH", self.dli_fname, 0);
  }
}

__attribute__((destructor)) void on_unload() { fp8scope::hook::g_passthrough.store(true, std::memory_order_relaxed); }

}  // namespace
