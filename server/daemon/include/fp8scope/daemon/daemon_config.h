// Everything fp8scoped can be told, with its defaults. Each option is a flag, an FP8SCOPE_*
// environment variable of the same name, and a key of the optional TOML --config file (flags win
// over the file, which wins over the environment). Defaults bind loopback only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::server {

inline constexpr const char* kDaemonVersion = FP8SCOPE_VERSION;

struct DaemonConfig {
  std::string listen = "127.0.0.1:7767";      // gRPC: unix:///path.sock or HOST:PORT (port 0 = pick one)
  std::string metrics = "127.0.0.1:9767";     // Prometheus /metrics and /health: HOST:PORT
  // Where clients on this host register shared memory: auto (the data dir's shared-memory.sock,
  // or none if it cannot be made), off, or a path.
  std::string shared_memory_socket = "auto";
  std::string data_dir = "fp8scope-data";     // the journal of accepted samples, and the SQLite history
  // Where the history goes: "" = the data dir's history.sqlite; a SQLite file; postgresql://...
  std::string history;
  double retention_days = 0;                  // history rows older than this are deleted; 0 = kept
  std::string te_log_dir;                     // TE debug-API statistics logs, a tree a job; "" = none
  std::string te_log_layout = "nvdlfw";        // or "rank-dirs": <job>/rank_<rank>/...
  std::uint64_t te_log_max_bytes = 1ull << 30;  // what those files may hold together
  std::string backend = "auto";               // auto | cpu | cuda
  int device = 0;                             // CUDA device for --backend cuda/auto
  std::uint64_t gpu_memory_budget_bytes = 8ull << 30;  // device memory the CUDA engine may hold
  int analysis_workers = 2;                   // samples analyzed at once
  int engine_threads = 0;                     // CPU engine threads; 0 = every core
  std::uint64_t queue_budget_bytes = 1ull << 30;   // payload memory waiting for analysis
  std::uint64_t max_sample_bytes = 512ull << 20;   // one sample's payload
  std::uint64_t max_inflight_bytes = 64ull << 20;  // per stream, unacknowledged
  std::uint64_t max_series = 150000;          // tensor metric series before new ones are suppressed
  std::uint64_t max_tensors = 20000;          // tensors with live state (delayed scaling, `fp8scope tensors`)
  double outlier_channel_factor = 8.0;        // an outlier channel's amax over the median channel amax
  std::uint64_t outlier_channel_window = 8;   // samples an outlier channel must hold in to persist
  // What one tensor costs in series (docs/operations.md "Cardinality"): the recipes exported as
  // metrics (all of them stay in history and `fp8scope tensors`), and the log2 histogram's bins.
  std::string metric_recipes = "tensor_current,tensor_delayed,mxfp8";
  bool log2_histogram_metrics = false;
  double series_ttl_seconds = 900;            // a series not updated for this long disappears
  double drain_seconds = 20;                  // on SIGTERM: time to finish queued samples
  double stall_timeout_seconds = 30;          // a sample's chunks, and a silent peer's pings
  bool per_rank_metrics = false;              // label metrics with rank instead of the worst rank
  bool per_expert_metrics = false;            // label metrics with the expert instead of the worst expert
  // Remote access, off unless asked for.
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files; a client CA makes client certs required
  std::string token_file;                     // bearer token every RPC must carry
  bool insecure = false;                      // allow a non-loopback listen without TLS or token
  std::string ready_file;                     // written as JSON {"grpc": ..., "metrics": ..., "pid": ...} once serving
  std::string log_level = "info";
  bool print_metrics_table = false;           // print the metrics table as JSON and exit

  std::string config_file;                    // where the above were read from, if anywhere
};

// Parses argv (and the environment and --config file). Returns the config, or an error that
// main() prints. --help and --version print their text and set exit_now.
struct ParsedConfig {
  DaemonConfig config;
  bool exit_now = false;  // --help / --version printed
  int exit_code = 0;
};
Result<ParsedConfig> parse_daemon_config(int argc, const char* const* argv);

// Checks that need no I/O: addresses, budgets, the remote-access rule.
Status validate(const DaemonConfig& config);

// --metric-recipes as recipe kinds ("all": every one), or an error naming the unknown recipe.
Result<std::vector<RecipeKind>> metric_recipe_kinds(const std::string& list);

// True for unix sockets, localhost and 127.0.0.0/8 / ::1 listen addresses.
bool is_loopback_address(const std::string& address);

}  // namespace fp8scope::server
