#include "fp8scope/services/access.h"

namespace fp8scope::server {

grpc::Status AccessCheck::check(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  const std::string expected = "Bearer " + token_;
  if (it == metadata.end()) return {grpc::StatusCode::UNAUTHENTICATED, "missing authorization: Bearer <token>"};
  const grpc::string_ref got = it->second;
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i] ^ (i < got.size() ? got.data()[i] : 0));
  }
  if (diff != 0) return {grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token"};
  return grpc::Status::OK;
}

}  // namespace fp8scope::server
