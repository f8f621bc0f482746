#include "fp8scope/cli/connection_flags.h"

#include "fp8scope/cli/number_checks.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <sstream>

#include "fp8scope/history/history_store.h"
#include "fp8scope/daemon_client/remote_history.h"

namespace fp8scope::cli {

void add_connection_flags(CLI::App* cmd, ConnectionFlags& f) {
  cmd->add_option("--endpoint", f.options.endpoint, "fp8scoped address: unix:///path.sock or HOST:PORT")
      ->envname("FP8SCOPE_ENDPOINT")
      ->capture_default_str();
  add_credential_flags(cmd, f);
}

void add_credential_flags(CLI::App* cmd, ConnectionFlags& f) {
  cmd->add_option("--token-file", f.token_file, "File with the daemon's bearer token")->envname("FP8SCOPE_TOKEN_FILE");
  cmd->add_option("--tls-ca", f.options.tls_ca, "PEM CA: connect with TLS and trust this CA")->envname("FP8SCOPE_TLS_CA");
  cmd->add_option("--tls-cert", f.options.tls_cert, "PEM client certificate (mutual TLS)")->envname("FP8SCOPE_TLS_CERT");
  cmd->add_option("--tls-key", f.options.tls_key, "PEM key of --tls-cert")->envname("FP8SCOPE_TLS_KEY");
  cmd->add_option("--tls-server-name", f.options.tls_server_name, "Name to check in the server certificate");
  cmd->add_option("--timeout", f.timeout_seconds,
                  "Seconds to wait for the daemon to connect and answer (a refused connection fails at once)")
      ->capture_default_str()
      ->transform(positive_seconds());
}

Result<ConnectionOptions> resolve(const ConnectionFlags& f) {
  ConnectionOptions o = f.options;
  if (const char* env = std::getenv("FP8SCOPE_TOKEN"); env != nullptr && f.token_file.empty()) o.token = env;
  if (!f.token_file.empty()) {
    std::ifstream in(f.token_file);
    if (!in) return Status::error("--token-file " + f.token_file + ": cannot read");
    std::stringstream s;
    s << in.rdbuf();
    std::string t = s.str();
    const auto first = t.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return Status::error("--token-file " + f.token_file + ": empty");
    o.token = t.substr(first, t.find_last_not_of(" \t\r\n") - first + 1);
  }
  return o;
}

std::unique_ptr<grpc::ClientContext> call_context(const ConnectionOptions& options, double timeout_seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  authorize(*context, options);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000)));
  context->set_wait_for_ready(false);
  return context;
}

Result<std::unique_ptr<history::HistoryReader>> open_history_source(const std::string& location,
                                                                   const ConnectionFlags& daemon) {
  if (!location.empty()) return history::open_history_reader(location);
  Result<ConnectionOptions> options = resolve(daemon);
  if (!options.ok()) return options.status();
  auto remote = RemoteHistoryReader::connect(options.value(), daemon.timeout_seconds);
  if (!remote.ok()) return remote.status();
  return std::unique_ptr<history::HistoryReader>(std::move(remote).value());
}

Result<std::unique_ptr<v1::Admin::Stub>> admin_stub(const ConnectionOptions& options) {
  Result<std::shared_ptr<grpc::Channel>> channel = open_channel(options);
  if (!channel.ok()) return channel.status();
  return v1::Admin::NewStub(channel.value());
}

}  // namespace fp8scope::cli
