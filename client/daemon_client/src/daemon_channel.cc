#include "fp8scope/daemon_channel.h"

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

std::string describe_rpc_error(const grpc::Status& status, const ConnectionOptions& o) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return "cannot reach fp8scoped at " + o.endpoint + ": " + status.error_message();
  }
  return "fp8scoped at " + o.endpoint + ": " + status.error_message();
}

}  // namespace fp8scope
