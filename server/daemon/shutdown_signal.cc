#include "fp8scope/daemon/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

namespace fp8scope::server {
namespace {

sigset_t shutdown_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

PosixShutdownSignal::PosixShutdownSignal() {
  const sigset_t set = shutdown_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished peer is an error return, not a reason to die
}

int PosixShutdownSignal::wait() {
  const sigset_t set = shutdown_set();
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

void ManualShutdownSignal::request(int signal_number) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ = true;
    signal_ = signal_number;
  }
  cv_.notify_all();
}

int ManualShutdownSignal::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return requested_; });
  return signal_;
}

}  // namespace fp8scope::server
