#include "fp8scope/daemon/daemon_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <sstream>

namespace fp8scope::server {
namespace {

// Every option once: its name (flag --name, env FP8SCOPE_NAME with '-' as '_', JSON key), help,
// and where it lands.
template <class T>
CLI::Option* add(CLI::App& app, const std::string& name, T& target, const std::string& help) {
  std::string env = "FP8SCOPE_" + name;
  for (char& c : env) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return app.add_option("--" + name, target, help)->envname(env)->capture_default_str();
}

void add_flag(CLI::App& app, const std::string& name, bool& target, const std::string& help) {
  std::string env = "FP8SCOPE_" + name;
  for (char& c : env) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  app.add_flag("--" + name, target, help)->envname(env);
}

// The effective configuration as a --config file, from CLI11's own writer (which quotes values as
// its reader expects). Keys that nothing set stay commented out at their default, so the file
// documents every default without pinning it.
std::string render_config(const CLI::App& app) {
  std::istringstream lines(app.config_to_str(true, true));
  std::ostringstream out;
  out << "# fp8scoped " << kDaemonVersion << " configuration, from `fp8scoped --print-config`. Commented keys\n"
      << "# hold their defaults; flags win over this file, and this file wins over FP8SCOPE_* variables.\n";
  std::string line;
  while (std::getline(lines, line)) {
    const auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) {
      if (!line.empty() && line[0] == '#' && line.find("fp8scoped:") != std::string::npos) continue;  // app blurb
      out << line << "\n";
      continue;
    }
    const CLI::Option* opt = app.get_option_no_throw("--" + line.substr(0, eq));
    out << (opt != nullptr && opt->count() == 0 ? "# " : "") << line << "\n";
  }
  return out.str();
}

}  // namespace

bool is_loopback_address(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  std::string host = address;
  if (const auto colon = host.rfind(':'); colon != std::string::npos) host.resize(colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  // Literal addresses only (and "localhost", loopback by RFC 6761): a name such as
  // 127.attacker.example is resolved later, to anything.
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return host == "localhost";
}

namespace {

// Where it listens and keeps things.
void add_place_options(CLI::App& app, DaemonConfig& c) {
  add(app, "listen", c.listen, "gRPC address: unix:///path.sock or HOST:PORT (port 0 picks a free port)");
  add(app, "metrics", c.metrics, "Prometheus /metrics and /health address, HOST:PORT");
  add(app, "shared-memory-socket", c.shared_memory_socket,
      "Where shippers on this host register their shared memory, so samples are copied once instead of streamed: "
      "auto (shared-memory.sock in --data-dir), off, or a socket path");
  add(app, "data-dir", c.data_dir, "Directory of the journal of accepted samples and, by default, the SQLite history");
  add(app, "history", c.history,
      "Where history goes: a SQLite file, or postgresql://user@host:port/database for one database a whole job's "
      "daemons share (default: history.sqlite in --data-dir)");
  add(app, "retention-days", c.retention_days, "Delete history rows older than this many days, hourly (0 = keep all)")
      ->check(CLI::Range(0.0, 36500.0));
  add(app, "te-log-dir", c.te_log_dir,
      "Also write every analyzed sample's statistics as Transformer Engine's debug API logs them, for the tools "
      "that read those logs: DIR/<job>/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-<rank>.log, "
      "appended to (default: off)");
  add(app, "te-log-layout", c.te_log_layout,
      "nvdlfw: DIR/<job>/nvdlfw_inspect_statistics_logs/..., or rank-dirs: DIR/<job>/rank_<rank>/"
      "nvdlfw_inspect_statistics_logs/..., one log_dir a rank as BioNeMo's recipes and their fp8_analysis heatmap "
      "have it")
      ->check(CLI::IsMember({"nvdlfw", "rank-dirs"}));
  add(app, "te-log-max-bytes", c.te_log_max_bytes,
      "What the --te-log-dir files may hold together; past it lines are dropped and counted");
}

// How it analyzes and exports.
void add_analysis_options(CLI::App& app, DaemonConfig& c) {
  add(app, "backend", c.backend, "Statistics engine: auto (CUDA when a device exists, else CPU), cpu or cuda");
  add(app, "device", c.device, "CUDA device index");
  add(app, "gpu-memory-budget-bytes", c.gpu_memory_budget_bytes, "Device memory the CUDA engine may hold");
  add(app, "analysis-workers", c.analysis_workers, "Samples analyzed concurrently");
  add(app, "engine-threads", c.engine_threads, "CPU engine threads per analysis (0 = every core)");
  add(app, "queue-budget-bytes", c.queue_budget_bytes, "Memory for payloads waiting for analysis; past it samples are dropped and counted");
  add(app, "max-sample-bytes", c.max_sample_bytes, "Largest accepted sample payload");
  add(app, "max-inflight-bytes", c.max_inflight_bytes, "Unacknowledged payload a stream may have in flight");
  add(app, "max-series", c.max_series, "Tensor metric series before new ones are suppressed (and counted)");
  add(app, "max-tensors", c.max_tensors,
      "Tensors whose state is kept (delayed-scaling history, the `fp8scope tensors` table); the least recently "
      "sampled go first");
  add(app, "outlier-channel-factor", c.outlier_channel_factor,
      "A channel (a column of X, a row of W) is an outlier when its amax exceeds this many times the median "
      "channel amax");
  add(app, "outlier-channel-window", c.outlier_channel_window,
      "Samples of a tensor an outlier channel must hold in to count as persistent (its index goes to history)");
  add(app, "metric-recipes", c.metric_recipes,
      "Emulated recipes exported as metrics, comma-separated, or all (the job's own FP8 is always exported; "
      "history and `fp8scope tensors` keep every recipe the policy runs)");
  add_flag(app, "log2-histogram-metrics", c.log2_histogram_metrics,
           "Export the log2-magnitude histogram under current scaling (49 series per tensor and FP8 format)");
  add(app, "series-ttl-seconds", c.series_ttl_seconds, "Seconds without an update before a series expires");
  add(app, "drain-seconds", c.drain_seconds, "On SIGTERM/SIGINT: seconds to finish queued samples before exiting");
  add(app, "stall-timeout-seconds", c.stall_timeout_seconds,
      "A sample whose next chunk does not come within this is dropped (stalled) and its memory freed; a client "
      "that stops answering keepalive pings is disconnected within it");
  add_flag(app, "per-rank-metrics", c.per_rank_metrics, "Label metrics with rank (default: the worst rank per series)");
  add_flag(app, "per-expert-metrics", c.per_expert_metrics,
           "Label metrics with a mixture-of-experts layer's expert (default: the worst expert per series), inside "
           "--max-series");
}

// Who may call it, and what it tells.
void add_access_options(CLI::App& app, DaemonConfig& c) {
  add(app, "tls-cert", c.tls_cert, "PEM server certificate (enables TLS)");
  add(app, "tls-key", c.tls_key, "PEM private key of --tls-cert");
  add(app, "tls-client-ca", c.tls_client_ca, "PEM CA; when given, clients must present a certificate it signed");
  add(app, "token-file", c.token_file, "File holding a bearer token every RPC must send (authorization: Bearer ...)");
  add_flag(app, "insecure", c.insecure, "Allow listening on a non-loopback address without TLS or a token");
  add(app, "ready-file", c.ready_file, "Write {grpc, metrics, pid} as JSON here once serving (for scripts and tests)");
  add(app, "log-level", c.log_level, "trace, debug, info, warn, error");
}

// Parses into `parsed`; help and version are answered here (exit_now).
Status parse_into(CLI::App& app, int argc, const char* const* argv, ParsedConfig& parsed) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::ostringstream out, err;
    parsed.exit_code = app.exit(e, out, err);
    parsed.exit_now = true;
    std::cout << out.str();
  } catch (const CLI::CallForVersion& e) {
    std::ostringstream out, err;
    parsed.exit_code = app.exit(e, out, err);
    parsed.exit_now = true;
    std::cout << out.str();
  } catch (const CLI::ConfigError& e) {
    const auto* file = app.get_config_ptr();
    return Status::error("config file " + (file && file->count() ? file->as<std::string>() : std::string("?")) + ": " +
                         e.what() + " (not a known key, or a bad value; fp8scoped --print-config lists every key)");
  } catch (const CLI::ParseError& e) {
    return Status::error(e.what());
  }
  return Status();
}

}  // namespace

Result<ParsedConfig> parse_daemon_config(int argc, const char* const* argv) {
  ParsedConfig parsed;
  DaemonConfig& c = parsed.config;
  CLI::App app{"fp8scoped: the fp8scope daemon. Receives tensor samples over gRPC, computes FP8 statistics, "
               "exports Prometheus metrics and keeps history in SQLite or PostgreSQL."};
  app.set_config("--config", "", "TOML file of `option = value` lines, option names as below (flags win over it, it wins over FP8SCOPE_*)");
  add_place_options(app, c);
  add_analysis_options(app, c);
  add_access_options(app, c);
  app.add_flag("--print-metrics-table", c.print_metrics_table, "Print every exported metric as JSON and exit")
      ->configurable(false);
  bool print_config = false;
  app.add_flag("--print-config", print_config,
               "Print the effective configuration (defaults, then environment, file and flags) as a --config file and exit")
      ->configurable(false);
  // A misspelt key in a config file is an error, not a silently ignored line.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", std::string("fp8scoped ") + kDaemonVersion);
  if (Status s = parse_into(app, argc, argv, parsed); !s.ok()) return s;
  if (parsed.exit_now) return parsed;
  if (auto* opt = app.get_config_ptr(); opt != nullptr && opt->count() > 0) c.config_file = opt->as<std::string>();
  if (print_config) {
    std::cout << render_config(app);
    parsed.exit_now = true;
  }
  return parsed;
}

Result<std::vector<RecipeKind>> metric_recipe_kinds(const std::string& list) {
  if (list == "all") return std::vector<RecipeKind>(std::begin(kAllRecipeKinds), std::end(kAllRecipeKinds));
  std::vector<RecipeKind> kinds;
  std::istringstream items(list);
  std::string name;
  while (std::getline(items, name, ',')) {
    if (name.empty()) continue;
    const std::optional<RecipeKind> kind = recipe_kind_from_name(name);
    if (!kind) {
      return Status::error("--metric-recipes: unknown recipe '" + name + "' (expected all, " + recipe_name_list() + ")");
    }
    kinds.push_back(*kind);
  }
  return kinds;
}

Status validate(const DaemonConfig& c) {
  if (Result<std::vector<RecipeKind>> kinds = metric_recipe_kinds(c.metric_recipes); !kinds.ok()) return kinds.status();
  if (c.backend != "auto" && c.backend != "cpu" && c.backend != "cuda") {
    return Status::error("--backend: expected auto, cpu or cuda, got " + c.backend);
  }
  if (c.analysis_workers < 1 || c.analysis_workers > 64) {
    return Status::error("--analysis-workers: expected 1..64, got " + std::to_string(c.analysis_workers));
  }
  if (c.queue_budget_bytes < c.max_sample_bytes) {
    return Status::error("--queue-budget-bytes (" + std::to_string(c.queue_budget_bytes) +
                         ") must be at least --max-sample-bytes (" + std::to_string(c.max_sample_bytes) + ")");
  }
  if (!c.te_log_dir.empty() && c.te_log_max_bytes < (1u << 20)) {
    return Status::error("--te-log-max-bytes: expected at least 1 MiB, got " + std::to_string(c.te_log_max_bytes));
  }
  if (c.max_tensors < 1) return Status::error("--max-tensors: expected at least 1");
  if (!(c.outlier_channel_factor > 1 && c.outlier_channel_factor <= 1e6)) {
    return Status::error("--outlier-channel-factor: expected a number above 1, at most 1e6, got " +
                         std::to_string(c.outlier_channel_factor));
  }
  if (c.outlier_channel_window < 1 || c.outlier_channel_window > 1024) {
    return Status::error("--outlier-channel-window: expected 1..1024 samples, got " +
                         std::to_string(c.outlier_channel_window));
  }
  if (c.max_inflight_bytes < (4u << 20)) return Status::error("--max-inflight-bytes: expected at least 4 MiB (one chunk)");
  if (c.series_ttl_seconds <= 0 || c.drain_seconds < 0) return Status::error("--series-ttl-seconds and --drain-seconds must be positive");
  if (!(c.stall_timeout_seconds >= 2 && c.stall_timeout_seconds <= 3600)) {
    return Status::error("--stall-timeout-seconds: expected 2..3600, got " + std::to_string(c.stall_timeout_seconds));
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) return Status::error("--tls-cert and --tls-key go together");
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) return Status::error("--tls-client-ca needs --tls-cert and --tls-key");
  const bool protected_remote = !c.tls_cert.empty() || !c.token_file.empty();
  if (!is_loopback_address(c.listen) && !protected_remote && !c.insecure) {
    return Status::error("refusing to listen on " + c.listen +
                         " without TLS or a token: pass --tls-cert/--tls-key or --token-file, or --insecure to accept the risk");
  }
  return Status();
}

}  // namespace fp8scope::server
