// Server credentials from the config: plain loopback by default; TLS with a server certificate,
// optionally requiring client certificates signed by a given CA; and the bearer token file.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "fp8scope/daemon/daemon_config.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::server {

Result<std::shared_ptr<grpc::ServerCredentials>> server_credentials(const DaemonConfig& config);

// The token in a file, surrounding whitespace removed; an empty file is an error.
Result<std::string> read_token_file(const std::string& path);

// The whole content of a (PEM) file, or an error naming it.
Result<std::string> read_text_file(const std::string& path, const std::string& option);

}  // namespace fp8scope::server
