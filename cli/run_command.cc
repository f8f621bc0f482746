#include "fp8scope/cli/run_command.h"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "fp8scope/shipper/cpu_list.h"
#include "fp8scope/v1/fp8scope.grpc.pb.h"

extern char** environ;

namespace fp8scope::cli {
namespace {

namespace fs = std::filesystem;

constexpr double kDaemonStartSeconds = 30.0;

fs::path executable_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : self.parent_path();
}

// An installed file beside this binary, else the build tree's copy, else nothing.
std::string locate(const char* env, const fs::path& installed, const char* build_path) {
  if (const char* e = std::getenv(env); e != nullptr && *e != '\0') return e;
  std::error_code ec;
  if (fs::exists(installed, ec)) return installed.string();
  if (build_path != nullptr && fs::exists(build_path, ec)) return build_path;
  return {};
}

#if defined(FP8SCOPE_HOOK_BUILD_PATH)
constexpr const char* kHookBuildPath = FP8SCOPE_HOOK_BUILD_PATH;
#else
constexpr const char* kHookBuildPath = nullptr;
#endif
#if defined(FP8SCOPE_SHIPPER_BUILD_PATH)
constexpr const char* kShipperBuildPath = FP8SCOPE_SHIPPER_BUILD_PATH;
#else
constexpr const char* kShipperBuildPath = nullptr;
#endif
#if defined(FP8SCOPE_DAEMON_BUILD_PATH)
constexpr const char* kDaemonBuildPath = FP8SCOPE_DAEMON_BUILD_PATH;
#else
constexpr const char* kDaemonBuildPath = nullptr;
#endif

bool daemon_answers(const ConnectionOptions& options, double timeout_seconds) {
  Result<std::unique_ptr<v1::Admin::Stub>> stub = admin_stub(options);
  if (!stub.ok()) return false;
  v1::DaemonStatus status;
  auto ctx = call_context(options, timeout_seconds);
  return stub.value()->GetStatus(ctx.get(), v1::GetStatusRequest(), &status).ok();
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// Starts fp8scoped in its own session (it outlives this command), logging into the data dir,
// and waits until its ready file appears.
Status start_daemon(const std::string& daemon, const RunOptions& o, std::ostream& err) {
  std::error_code ec;
  fs::create_directories(o.data_dir, ec);
  if (ec) return Status::error("--data-dir " + o.data_dir + ": " + ec.message());
  const fs::path ready = fs::path(o.data_dir) / "fp8scoped.ready.json";
  const fs::path log = fs::path(o.data_dir) / "fp8scoped.log";
  fs::remove(ready, ec);
  std::vector<std::string> args = {daemon,       "--listen",     o.connection.options.endpoint,
                                   "--metrics",  o.daemon_metrics, "--data-dir", o.data_dir, "--ready-file", ready.string()};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, daemon.c_str(), &actions, &attr, pointers(args).data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::error("cannot start " + daemon + ": " + std::strerror(rc));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kDaemonStartSeconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(ready, ec)) {
      err << "fp8scope run: started fp8scoped (pid " << pid << ") on " << o.connection.options.endpoint
          << ", history in " << o.data_dir << ", log " << log.string() << "; it keeps running (stop it with kill "
          << pid << ")\n";
      return Status();
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return Status::error("fp8scoped exited at start (status " + std::to_string(status) + "); see " + log.string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::error("fp8scoped did not become ready within 30 s; see " + log.string());
}

std::string default_run_name(const std::string& job) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &utc);
  return job + "-" + stamp;
}

pid_t g_child = -1;
void forward_signal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

}  // namespace

CLI::App* add_run_command(CLI::App& app, RunOptions& o) {
  CLI::App* cmd = app.add_subcommand("run", "Run a training command under the hook: fp8scope run [flags] -- CMD ARGS...");
  add_connection_flags(cmd, o.connection);
  add_policy_flags(cmd, o.policy);
  cmd->add_option("--job", o.job, "Job name (metric label job; default: the command's name)")->envname("FP8SCOPE_JOB");
  cmd->add_option("--run", o.run, "Run name (default: JOB-<UTC time>)")->envname("FP8SCOPE_RUN");
  cmd->add_flag("--start-daemon", o.start_daemon, "Start a local fp8scoped on --endpoint if none answers");
  cmd->add_option("--data-dir", o.data_dir, "History directory of a daemon --start-daemon starts")->capture_default_str();
  cmd->add_option("--daemon-metrics", o.daemon_metrics, "Metrics address of a daemon --start-daemon starts")
      ->capture_default_str();
  cmd->add_option("--shipper-cpus", o.shipper_cpus,
                  "Cores the shipper runs on, as taskset writes them (e.g. 7 or 6-7): keep it off the training "
                  "process's cores")
      ->envname("FP8SCOPE_SHIPPER_CPUS");
  cmd->add_option("--store-wait", o.store_wait_seconds,
                  "After the command: seconds to wait for its shipper to finish and the daemon to store every "
                  "sample (0: return at once)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("command", o.command, "The command and its arguments, after --")->required();
  return cmd;
}

namespace {

// Where the hook and the shipper are, found before anything starts.
struct RunParts {
  std::string hook, shipper, job, run;
};

// The flags, checked; the exit code when they cannot be used (0: fine).
int check_run_flags(const RunOptions& o, const fs::path& here, RunParts& parts, std::ostream& err) {
  for (const std::string& line : te_config_notes(o.policy)) err << "fp8scope run: --te-config: " << line << "\n";
  Result<v1::Policy> check = apply_policy_flags(o.policy, v1::Policy());
  if (!check.ok() && !(te_config_samples_nothing(o.policy) && !o.policy.selects())) {
    err << "fp8scope run: " << check.message() << "\n";
    return kUsage;
  }
  if (!o.shipper_cpus.empty()) {
    if (Result<std::vector<int>> cpus = shipper::parse_cpu_list(o.shipper_cpus); !cpus.ok()) {
      err << "fp8scope run: --shipper-cpus: " << cpus.message() << "\n";
      return kUsage;
    }
  }
  parts.hook = locate("FP8SCOPE_HOOK", here / "../lib/fp8scope/libfp8scope_hook.so", kHookBuildPath);
  parts.shipper = locate("FP8SCOPE_SHIPPER", here / "fp8scope-shipper", kShipperBuildPath);
  if (parts.hook.empty() || parts.shipper.empty()) {
    err << "fp8scope run: cannot find "
        << (parts.hook.empty() ? "libfp8scope_hook.so (set FP8SCOPE_HOOK)" : "fp8scope-shipper (set FP8SCOPE_SHIPPER)")
        << "\n";
    return kUsage;
  }
  parts.job = !o.job.empty() ? o.job : fs::path(o.command[0]).filename().string();
  parts.run = !o.run.empty() ? o.run : default_run_name(parts.job);
  return 0;
}

// A daemon that answers (started when asked and none does), told this job's policy flags; the
// exit code when one was asked for and cannot be had (0: go on, with or without a daemon).
int prepare_daemon(const RunOptions& o, const ConnectionOptions& connection, const fs::path& here,
                   const std::string& job, std::ostream& err) {
  bool reachable = daemon_answers(connection, std::min(o.connection.timeout_seconds, 2.0));
  if (!reachable && o.start_daemon) {
    const std::string daemon = locate("FP8SCOPE_DAEMON", here / "fp8scoped", kDaemonBuildPath);
    if (daemon.empty()) {
      err << "fp8scope run: --start-daemon: cannot find fp8scoped (set FP8SCOPE_DAEMON)\n";
      return kUsage;
    }
    if (Status s = start_daemon(daemon, o, err); !s.ok()) {
      err << "fp8scope run: " << s.message() << "\n";
      return kUnreachable;
    }
    reachable = true;
  }
  if (!reachable) {
    err << "fp8scope run: fp8scoped at " << connection.endpoint
        << " does not answer; the command runs, and its samples are dropped and counted until the daemon answers "
           "(--start-daemon starts one)\n";
  } else if (o.policy.any()) {
    // The flags become this job's own policy on the daemon: other jobs it serves keep theirs.
    Result<std::unique_ptr<v1::Admin::Stub>> stub = admin_stub(connection);
    v1::Policy result;
    if (stub.ok() &&
        send_policy(*stub.value(), connection, o.connection.timeout_seconds, o.policy, job, false, &result).ok()) {
      err << "fp8scope run: job " << job << " samples with a policy of its own (version " << result.version()
          << "); other jobs keep theirs\n";
    } else if (stub.ok()) {
      err << "fp8scope run: the daemon refused the policy; the hook follows the flags until it gets the daemon's\n";
    }
  }
  return 0;
}

// This process's environment plus what the hook and its shipper read.
std::vector<std::string> child_environment(const RunOptions& o, const ConnectionOptions& connection,
                                           const RunParts& parts) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  const std::string preload = env.count("LD_PRELOAD") ? env["LD_PRELOAD"] : "";
  env["LD_PRELOAD"] = preload.empty() ? parts.hook : parts.hook + ":" + preload;
  env["FP8SCOPE_SHIPPER"] = parts.shipper;
  env["FP8SCOPE_ENDPOINT"] = connection.endpoint;
  env["FP8SCOPE_JOB"] = parts.job;
  env["FP8SCOPE_RUN"] = parts.run;
  if (!o.shipper_cpus.empty()) env["FP8SCOPE_SHIPPER_CPUS"] = o.shipper_cpus;
  if (!o.connection.token_file.empty()) env["FP8SCOPE_TOKEN_FILE"] = fs::absolute(o.connection.token_file).string();
  if (!connection.tls_ca.empty()) env["FP8SCOPE_TLS_CA"] = connection.tls_ca;
  if (!connection.tls_cert.empty()) env["FP8SCOPE_TLS_CERT"] = connection.tls_cert;
  if (!connection.tls_key.empty()) env["FP8SCOPE_TLS_KEY"] = connection.tls_key;
  for (const auto& [k, v] : policy_environment(o.policy)) env[k] = v;
  std::vector<std::string> envs;
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  return envs;
}

// The daemon's count of accepted samples not yet stored, and records not yet written; nullopt when
// it does not answer.
std::optional<std::pair<std::uint64_t, std::uint64_t>> unstored(const ConnectionOptions& connection) {
  Result<std::unique_ptr<v1::Admin::Stub>> stub = admin_stub(connection);
  if (!stub.ok()) return std::nullopt;
  v1::DaemonStatus status;
  auto ctx = call_context(connection, 5.0);
  if (!stub.value()->GetStatus(ctx.get(), v1::GetStatusRequest(), &status).ok()) return std::nullopt;
  return std::make_pair(status.unstored_samples(), status.history_pending());
}

// After the job: its shipper outlives it, sending what the ring still holds. Every process the job
// started holds `held` open (the shipper too: posix_spawn keeps it), so EOF on it means they have
// all exited; then the daemon stores what it accepted. Each wait is bounded by `seconds` in all;
// what is still on its way is said, with how to wait for it.
void wait_until_stored(int held, double seconds, const ConnectionOptions& connection, std::ostream& err) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto left_ms = [&] {
    return static_cast<int>(std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count()));
  };
  bool shipped = false;
  for (;;) {
    pollfd p{held, POLLIN, 0};
    const int ready = poll(&p, 1, std::min(left_ms(), 1000));
    char byte;
    if (ready > 0 && read(held, &byte, 1) <= 0) {
      shipped = true;
      break;
    }
    if (ready < 0 && errno != EINTR) break;
    if (left_ms() == 0) break;
  }
  close(held);
  if (!shipped) {
    err << "fp8scope run: the job's processes (its shipper among them) are still running after " << seconds
        << " s; samples may still be on their way: `fp8scope status` shows unstored_samples until they are stored\n";
    return;
  }
  std::optional<std::pair<std::uint64_t, std::uint64_t>> left;
  for (;;) {
    left = unstored(connection);
    if (!left || (left->first == 0 && left->second == 0) || left_ms() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left_ms(), 100)));
  }
  if (!left) {
    err << "fp8scope run: the daemon did not answer after the job; `fp8scope status` says what it stored\n";
  } else if (left->first > 0 || left->second > 0) {
    err << "fp8scope run: " << left->first << " accepted samples and " << left->second
        << " records are not stored yet after " << seconds << " s; `fp8scope status` shows unstored_samples and "
           "history_pending until both read 0\n";
  }
}

// Runs the command and returns its exit status (128 + the signal that ended it). `inherit`, when
// not -1, stays open in the command and what it starts.
int spawn_and_wait(std::vector<std::string> argv, std::vector<std::string> envs, std::ostream& err, int inherit = -1) {
  // Ctrl-C reaches the command through the terminal's process group; SIGTERM sent to us is passed on.
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  signal(SIGTERM, forward_signal);
  pid_t pid = -1;
  if (inherit >= 0) fcntl(inherit, F_SETFD, 0);  // no FD_CLOEXEC: the command keeps it across exec
  const int rc = posix_spawnp(&pid, argv[0].c_str(), nullptr, nullptr, pointers(argv).data(), pointers(envs).data());
  if (inherit >= 0) close(inherit);
  if (rc != 0) {
    err << "fp8scope run: cannot run " << argv[0] << ": " << std::strerror(rc) << "\n";
    return 127;
  }
  g_child = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int run_run(const RunOptions& o, std::ostream&, std::ostream& err) {
  Result<ConnectionOptions> connection = resolve(o.connection);
  if (!connection.ok()) {
    err << "fp8scope run: " << connection.message() << "\n";
    return kUsage;
  }
  const fs::path here = executable_dir();
  RunParts parts;
  if (const int code = check_run_flags(o, here, parts, err); code != 0) return code;
  if (te_config_samples_nothing(o.policy)) {
    // The job matters more than our sampling: it runs as it would without fp8scope.
    err << "fp8scope run: --te-config " << *o.policy.te_config
        << " asks for nothing fp8scope samples (each part left out is listed above); the command runs without "
           "the hook\n";
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
    return spawn_and_wait(o.command, std::move(envs), err);
  }
  if (const int code = prepare_daemon(o, connection.value(), here, parts.job, err); code != 0) return code;
  std::vector<std::string> envs = child_environment(o, connection.value(), parts);
  err << "fp8scope run: job " << parts.job << ", run " << parts.run << ", daemon " << connection.value().endpoint << "\n";
  int held[2] = {-1, -1};
  if (o.store_wait_seconds <= 0 || pipe2(held, O_CLOEXEC) != 0) return spawn_and_wait(o.command, std::move(envs), err);
  const int code = spawn_and_wait(o.command, std::move(envs), err, held[1]);
  wait_until_stored(held[0], o.store_wait_seconds, connection.value(), err);
  return code;
}

}  // namespace fp8scope::cli
