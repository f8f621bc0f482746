#include "sample_validation.h"

#include <cmath>
#include <limits>

#include "fp8scope/wire.h"

namespace fp8scope::server {
namespace {

HeaderCheck refuse(std::string reason, std::string message) { return {std::nullopt, {std::move(reason), std::move(message)}}; }

}  // namespace

bool valid_label(const std::string& value) {
  if (value.empty() || value.size() > kMaxLabelBytes) return false;
  for (unsigned char c : value) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

std::optional<Refusal> check_hello(const v1::Hello& hello) {
  if (hello.protocol_version() != wire::kProtocolVersion) {
    return Refusal{"bad_version", "unsupported protocol version " + std::to_string(hello.protocol_version()) +
                                      "; this daemon speaks fp8scope.v1 version " +
                                      std::to_string(wire::kProtocolVersion)};
  }
  if (!valid_label(hello.job()) || !valid_label(hello.run())) {
    return Refusal{"bad_hello", "job and run must be 1.." + std::to_string(kMaxLabelBytes) + " printable ASCII characters"};
  }
  if (hello.world_size() != 0 && hello.rank() >= hello.world_size()) {
    return Refusal{"bad_hello", "rank " + std::to_string(hello.rank()) + " is not below world_size " +
                                    std::to_string(hello.world_size())};
  }
  return std::nullopt;
}

HeaderCheck check_header(const v1::TensorHeader& h, std::uint64_t max_sample_bytes) {
  const std::optional<DType> dtype = wire::from_wire(h.dtype());
  if (!dtype) return refuse("bad_dtype", "unknown dtype " + std::to_string(h.dtype()));
  if (!valid_label(h.layer())) {
    return refuse("bad_layer", "layer must be 1.." + std::to_string(kMaxLabelBytes) + " printable ASCII characters");
  }
  if (!wire::from_wire(h.operand())) return refuse("bad_operand", "operand must be x, w or dy");
  if (h.gemm() < v1::GEMM_FPROP || h.gemm() > v1::GEMM_UNKNOWN) return refuse("bad_gemm", "gemm must be fprop, dgrad, wgrad or unknown");
  if (h.shape_size() > kMaxRank) {
    return refuse("bad_shape", "expected at most " + std::to_string(kMaxRank) + " dimensions, got " +
                                   std::to_string(h.shape_size()));
  }
  SampleShape s;
  s.dtype = *dtype;
  s.numel = 1;
  for (std::int64_t d : h.shape()) {
    if (d <= 0) return refuse("bad_shape", "expected every dimension > 0, got " + std::to_string(d));
    if (s.numel > std::numeric_limits<std::int64_t>::max() / d) return refuse("bad_shape", "element count overflows");
    s.numel *= d;
  }
  s.cols = h.shape_size() == 0 ? 1 : h.shape(h.shape_size() - 1);
  s.rows = s.numel / s.cols;
  const std::uint64_t bytes = static_cast<std::uint64_t>(s.numel) * static_cast<std::uint64_t>(dtype_bytes(*dtype));
  if (s.numel > std::numeric_limits<std::int64_t>::max() / 8 || bytes != h.payload_bytes()) {
    return refuse("size_mismatch", "payload_bytes " + std::to_string(h.payload_bytes()) + " != shape x dtype = " +
                                       std::to_string(bytes));
  }
  if (bytes > max_sample_bytes) {
    return refuse("too_large", "sample of " + std::to_string(bytes) + " bytes exceeds the daemon's limit of " +
                                   std::to_string(max_sample_bytes));
  }
  if (!std::isfinite(h.scale_inv()) || h.scale_inv() < 0.0f) {
    return refuse("bad_scale", "scale_inv must be finite and >= 0, got " + std::to_string(h.scale_inv()));
  }
  return {s, {}};
}

}  // namespace fp8scope::server
