#include "fp8scope/daemon/server_security.h"

#include <grpcpp/security/server_credentials.h>

#include <fstream>
#include <sstream>

namespace fp8scope::server {

Result<std::string> read_text_file(const std::string& path, const std::string& option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(option + " " + path + ": cannot read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<std::string> read_token_file(const std::string& path) {
  Result<std::string> text = read_text_file(path, "--token-file");
  if (!text.ok()) return text.status();
  std::string t = text.value();
  const auto first = t.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return Status::error("--token-file " + path + ": empty");
  t = t.substr(first, t.find_last_not_of(" \t\r\n") - first + 1);
  return t;
}

Result<std::shared_ptr<grpc::ServerCredentials>> server_credentials(const DaemonConfig& c) {
  if (c.tls_cert.empty()) return grpc::InsecureServerCredentials();
  Result<std::string> cert = read_text_file(c.tls_cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  Result<std::string> key = read_text_file(c.tls_key, "--tls-key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({key.value(), cert.value()});
  if (!c.tls_client_ca.empty()) {
    Result<std::string> ca = read_text_file(c.tls_client_ca, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = ca.value();
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace fp8scope::server
