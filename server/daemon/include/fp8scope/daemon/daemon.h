// fp8scoped assembled: the gRPC server (Ingest + Admin), the analysis pipeline, the metrics
// endpoint, the history store, and a housekeeping loop. start() binds everything (port 0 picks a
// port, reported by the address getters); run_until() serves until the signal, then shuts down:
// stop accepting, drain the queue within --drain-seconds, flush the history, return 0.
#pragma once

#include <memory>
#include <string>

#include "fp8scope/daemon/daemon_config.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/daemon/shutdown_signal.h"

namespace fp8scope::server {

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> start(const DaemonConfig& config);
  ~Daemon();

  std::string grpc_address() const;
  std::string metrics_address() const;

  // Serves until `signal` fires, then shuts down gracefully. Returns the process exit code.
  int run_until(ShutdownSignal& signal);

 private:
  struct Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8scope::server
