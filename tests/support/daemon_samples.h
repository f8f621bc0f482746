// What the integration tests send a real fp8scoped: the connection to it and the header of an f32
// activation sample (fprop X), the sample most of them stream.
#pragma once

#include <cstdint>
#include <string>

#include "daemon_fixture.h"
#include "fp8scope/daemon_client/daemon_channel.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::testing {

inline ConnectionOptions to(const DaemonProcess& d) {
  ConnectionOptions o;
  o.endpoint = d.grpc();
  return o;
}

inline v1::TensorHeader f32_header(const std::string& layer, std::uint64_t step, std::int64_t rows, std::int64_t cols) {
  v1::TensorHeader h;
  h.set_step(step);
  h.set_layer(layer);
  h.set_gemm(v1::GEMM_FPROP);
  h.set_operand(v1::OPERAND_X);
  h.set_dtype(v1::DTYPE_F32);
  h.add_shape(rows);
  h.add_shape(cols);
  return h;
}

}  // namespace fp8scope::testing
