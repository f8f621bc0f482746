// Who may call the daemon: with a token configured, every RPC must carry
// "authorization: Bearer <token>" (compared in constant time); TLS and client certificates are
// enforced by the server credentials (server_security.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

namespace fp8scope::server {

class AccessCheck {
 public:
  explicit AccessCheck(std::string token) : token_(std::move(token)) {}
  grpc::Status check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;
};

}  // namespace fp8scope::server
