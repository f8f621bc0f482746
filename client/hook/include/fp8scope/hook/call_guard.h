// The first thing every interposed function does. libcublas calls cublasLtMatmul through the PLT,
// so a cublasGemmEx reaches our cublasLtMatmul too: only the outermost call on a thread is looked
// at, the inner one passes straight through. After the process started exiting (our destructor
// ran) or in a forked child that did not exec, nothing is looked at.
#pragma once

#include <atomic>

namespace fp8scope::hook {

// Set by the library destructor and by the fork handler in the child.
inline std::atomic<bool> g_passthrough{false};

class CallGuard {
 public:
  CallGuard() : outermost_(depth_++ == 0) {}
  ~CallGuard() { --depth_; }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

  // True when this call should be observed.
  bool observe() const { return outermost_ && !g_passthrough.load(std::memory_order_relaxed); }

 private:
  // initial-exec: the hook is preloaded, so its TLS is static and costs no __tls_get_addr call.
  static inline thread_local int depth_ __attribute__((tls_model("initial-exec"))) = 0;
  bool outermost_;
};

}  // namespace fp8scope::hook
