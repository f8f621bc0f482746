// The flags every command that talks to fp8scoped shares: --endpoint (FP8SCOPE_ENDPOINT), TLS and
// the token (--token-file, or FP8SCOPE_TOKEN), and the Admin stub built from them.
#pragma once

#include <memory>
#include <string>

#include "fp8scope/daemon_client/daemon_channel.h"
#include "fp8scope/history/history_reader.h"
#include "fp8scope/v1/fp8scope.grpc.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

inline constexpr int kUnreachable = 1;  // exit code when fp8scoped cannot be reached or fails the call
inline constexpr int kUsage = 2;        // bad flags or input

struct ConnectionFlags {
  ConnectionOptions options;
  std::string token_file;
  double timeout_seconds = 10.0;
};

void add_connection_flags(CLI::App* cmd, ConnectionFlags& flags);
// The same without --endpoint (TLS, token, timeout), for a command that names the daemon its own way.
void add_credential_flags(CLI::App* cmd, ConnectionFlags& flags);

// Resolves the token file into options.token; an error line names the file.
Result<ConnectionOptions> resolve(const ConnectionFlags& flags);

// A ClientContext with the token and a deadline.
std::unique_ptr<grpc::ClientContext> call_context(const ConnectionOptions& options, double timeout_seconds);

Result<std::unique_ptr<v1::Admin::Stub>> admin_stub(const ConnectionOptions& options);

// The history a command reads: `location` (a SQLite file or data dir, or a PostgreSQL URL) when
// given, else the daemon's Admin API as `daemon` names it.
Result<std::unique_ptr<history::HistoryReader>> open_history_source(const std::string& location,
                                                                   const ConnectionFlags& daemon);

}  // namespace fp8scope::cli
