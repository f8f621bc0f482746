// How a client (the CLI, the shipper) reaches fp8scoped: the endpoint (unix:///path.sock or
// HOST:PORT), TLS (a CA to trust, optionally a client certificate) and the bearer token.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope {

inline constexpr const char* kDefaultEndpoint = "127.0.0.1:7767";

struct ConnectionOptions {
  std::string endpoint = kDefaultEndpoint;
  std::string tls_ca;                 // PEM file: use TLS and trust this CA
  std::string tls_cert, tls_key;      // PEM files: present this client certificate
  std::string token;                  // bearer token (from --token-file or FP8SCOPE_TOKEN)
  std::string tls_server_name;        // override the name checked in the server certificate
};

Result<std::shared_ptr<grpc::Channel>> open_channel(const ConnectionOptions& options);

// Adds the bearer token (if any) to a call.
void authorize(grpc::ClientContext& context, const ConnectionOptions& options);

// Connects the channel, waiting at most timeout_seconds. Returns READY, or TRANSIENT_FAILURE at once
// when an attempt failed (nothing listening, a name that does not resolve: the next call says why),
// or the state it was still in at the deadline (a host that does not answer).
grpc_connectivity_state wait_for_connection(grpc::Channel& channel, double timeout_seconds);

// One line a person can act on for a failed RPC: for an unreachable daemon, "cannot reach fp8scoped
// at E: <what went wrong, in words>; <what to try>"; else the daemon's own message.
std::string describe_rpc_error(const grpc::Status& status, const ConnectionOptions& options);

}  // namespace fp8scope
