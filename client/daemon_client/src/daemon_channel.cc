#include "fp8scope/daemon_client/daemon_channel.h"

#include <chrono>
#include <fstream>
#include <sstream>

namespace fp8scope {
namespace {

Result<std::string> read_pem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(std::string(what) + " " + path + ": cannot read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Result<std::shared_ptr<grpc::Channel>> open_channel(const ConnectionOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!o.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    Result<std::string> ca = read_pem(o.tls_ca, "--tls-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = ca.value();
    if (!o.tls_cert.empty()) {
      Result<std::string> cert = read_pem(o.tls_cert, "--tls-cert");
      if (!cert.ok()) return cert.status();
      Result<std::string> key = read_pem(o.tls_key, "--tls-key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = cert.value();
      ssl.pem_private_key = key.value();
    }
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(o.endpoint, creds, args);
}

void authorize(grpc::ClientContext& context, const ConnectionOptions& o) {
  if (!o.token.empty()) context.AddMetadata("authorization", "Bearer " + o.token);
}

grpc_connectivity_state wait_for_connection(grpc::Channel& channel, double timeout_seconds) {
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  grpc_connectivity_state state = channel.GetState(true);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE) {
    if (!channel.WaitForStateChange(state, deadline)) break;
    state = channel.GetState(true);
  }
  return state;
}

namespace {

// gRPC's transport text ("failed to connect to all addresses; last error: UNKNOWN: ipv4:...:
// Connection refused", "DNS resolution failed ... C-ares status is not ARES_SUCCESS ...") in words.
std::string unreachable_reason(const grpc::Status& status) {
  const std::string& m = status.error_message();
  auto has = [&](const char* text) { return m.find(text) != std::string::npos; };
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return "no answer within --timeout";
  if (has("Connection refused")) return "nothing is listening there (connection refused)";
  if (has("DNS resolution failed") || has("ARES") || has("Domain name not found") || has("not resolve")) {
    return "the host name does not resolve";
  }
  if (has("No such file or directory")) return "no socket at that path";
  if (has("Permission denied")) return "permission denied";
  if (has("No route to host") || has("Network is unreachable")) return "no route to that host";
  if (has("Connection reset") || has("Socket closed") || has("handshake") || has("SSL") || has("TLS")) {
    return "the connection closed at once (a TLS daemon reached without --tls-ca, or the reverse?)";
  }
  return m.empty() ? "unavailable" : m;
}

}  // namespace

std::string describe_rpc_error(const grpc::Status& status, const ConnectionOptions& o) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "cannot reach fp8scoped at " + o.endpoint + ": " + unreachable_reason(status) +
             ". Is fp8scoped running there? Pass --endpoint HOST:PORT or unix:///path.sock, or set FP8SCOPE_ENDPOINT";
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return "fp8scoped at " + o.endpoint + " refused this client: " + status.error_message() +
             " (pass its token with --token-file, or set FP8SCOPE_TOKEN_FILE)";
    default:
      return "fp8scoped at " + o.endpoint + ": " + status.error_message();
  }
}

}  // namespace fp8scope
