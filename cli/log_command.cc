#include "fp8scope/cli/log_command.h"

#include "fp8scope/cli/number_checks.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cmath>

#include "fp8scope/daemon_client/sample_stream.h"

namespace fp8scope::cli {

void add_log_command(CLI::App& app, LogOptions& o) {
  CLI::App* cmd = app.add_subcommand("log", "Record a scalar of a run (loss, grad norm, ...) in the daemon's history");
  add_connection_flags(cmd, o.connection);
  cmd->add_option("--run", o.run, "Run name")->envname("FP8SCOPE_RUN")->required();
  cmd->add_option("--job", o.job, "Job name")->envname("FP8SCOPE_JOB")->capture_default_str();
  cmd->add_option("--step", o.step, "Training step")->required()->check(step_number());
  cmd->add_option("--name", o.name, "Scalar name")->capture_default_str();
  cmd->add_option("--value", o.value, "Its value")->required();
  cmd->add_option("--rank", o.rank, "Rank that measured it")->capture_default_str();
}

int run_log(const LogOptions& o, std::ostream& out, std::ostream& err) {
  bool printable = !o.name.empty() && o.name.size() <= 63;
  for (char c : o.name) printable = printable && c > 0x20 && c < 0x7f;
  if (!printable) {
    err << "fp8scope log: --name: expected 1..63 printable ASCII characters, got '" << o.name << "'\n";
    return kUsage;
  }
  Result<ConnectionOptions> conn = resolve(o.connection);
  if (!conn.ok()) {
    err << "fp8scope log: " << conn.message() << "\n";
    return kUsage;
  }
  auto stream = SampleStream::open(conn.value(), make_hello(o.job, o.run, o.rank, o.rank + 1,
                                                            static_cast<std::uint32_t>(getpid())),
                                   o.connection.timeout_seconds);
  if (!stream.ok()) {
    err << "fp8scope log: " << stream.message() << "\n";
    return kUnreachable;
  }
  Status sent = stream.value()->send_scalar(o.step, o.name, o.value);
  if (sent.ok()) sent = stream.value()->close();
  if (!sent.ok()) {
    err << "fp8scope log: " << sent.message() << "\n";
    return kUnreachable;
  }
  out << "logged " << o.name << " = " << o.value << " at step " << o.step << " of run " << o.run << "\n";
  return 0;
}

}  // namespace fp8scope::cli
