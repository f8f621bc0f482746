// The real fp8scoped for integration tests: started on free loopback ports with its own data dir,
// found through its --ready-file (polled with a deadline, never a fixed sleep), stopped by signal.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace fp8scope::testing {

class DaemonProcess {
 public:
  // Starts fp8scoped with --listen `listen` --metrics 127.0.0.1:0 --data-dir data_dir plus
  // extra_args; fails the test if it does not become ready within 30 s.
  DaemonProcess(const std::string& data_dir, std::vector<std::string> extra_args = {},
                const std::string& listen = "127.0.0.1:0");
  ~DaemonProcess();

  const std::string& grpc() const { return grpc_; }
  const std::string& metrics() const { return metrics_; }
  const std::string& log_path() const { return log_; }
  std::string log() const;
  // SIGTERM (or another signal) and the exit status, or -1000 if it did not exit in time.
  int stop(int signal_number, double timeout_seconds = 60.0);
  bool running() { return child_ && child_->running(); }
  int pid() const { return child_ ? child_->pid() : -1; }

 private:
  std::string ready_file_, log_, grpc_, metrics_;
  std::unique_ptr<ChildProcess> child_;
};

// GET http://host:port/path over loopback; returns the body ("" on failure).
std::string http_get(const std::string& host_port, const std::string& path);

// Prometheus text exposition: the value of the series with exactly these labels (NaN if absent).
double metric_value(const std::string& exposition, const std::string& name, const std::map<std::string, std::string>& labels);
// The series of metric `name` whose value is not 0, as their lines (drop counters a test expects at 0).
std::vector<std::string> nonzero_series(const std::string& exposition, const std::string& name);

// Polls fn() until it is true or the deadline passes (readiness by retrying, not by sleeping a
// fixed time); the last answer after the deadline.
template <class F>
bool eventually(F fn, double seconds = 60.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fn()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return fn();
}

// Waits until the daemon has analyzed its samples and committed exactly `records` history records
// (`fp8scope status`), failing the test after the deadline.
void wait_for_records_stored(const DaemonProcess& d, std::uint64_t records);

// A loopback port nobody listens on right now.
int free_port();

// Runs the real `fp8scope` CLI.
ProcessResult cli(std::vector<std::string> args, double timeout_seconds = 120.0);

}  // namespace fp8scope::testing
