// fp8scoped: parses flags, starts the daemon, serves until SIGTERM/SIGINT.
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>

#include "fp8scope/daemon/daemon.h"
#include "fp8scope/daemon/memory_tuning.h"
#include "fp8scope/export/metrics_table.h"

int main(int argc, char** argv) {
  using namespace fp8scope::server;
  PosixShutdownSignal signals;  // before any thread starts
  // A file size limit makes history writes fail (and be retried), not kill the daemon.
  std::signal(SIGXFSZ, SIG_IGN);
  bound_heap_memory();
  auto parsed = parse_daemon_config(argc, argv);
  if (!parsed.ok()) {
    std::cerr << "fp8scoped: " << parsed.message() << "\n";
    return 2;
  }
  if (parsed.value().exit_now) return parsed.value().exit_code;
  const DaemonConfig& config = parsed.value().config;
  if (config.print_metrics_table) {
    std::cout << metrics_table_json() << "\n";
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  auto daemon = Daemon::start(config);
  if (!daemon.ok()) {
    spdlog::error("{}", daemon.message());
    return 1;
  }
  return daemon.value()->run_until(signals);
}
