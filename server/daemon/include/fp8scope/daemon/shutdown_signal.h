// What tells the daemon to stop, behind an interface so tests can stand in for the operating
// system (the pattern of dcgm-exporter's pkg/cmd/signals.go).
#pragma once

#include <condition_variable>
#include <mutex>

namespace fp8scope::server {

class ShutdownSignal {
 public:
  virtual ~ShutdownSignal() = default;
  // Blocks until shutdown is requested; returns the signal number (or 0 for a programmatic stop).
  virtual int wait() = 0;
};

// SIGTERM and SIGINT, taken synchronously with sigwait(). Construct it in main() before any
// thread starts, so every thread inherits the blocked mask and no handler runs on a random thread.
class PosixShutdownSignal final : public ShutdownSignal {
 public:
  PosixShutdownSignal();
  int wait() override;
};

// A stop requested from code: in-process tests and embedders.
class ManualShutdownSignal final : public ShutdownSignal {
 public:
  void request(int signal_number = 0);
  int wait() override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false;
  int signal_ = 0;
};

}  // namespace fp8scope::server
