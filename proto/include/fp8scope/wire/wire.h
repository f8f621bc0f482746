// Conversions between the wire enums (proto/fp8scope/v1) and fp8scope's own types and names, so
// the daemon, the shipper and the CLI spell every label the same way.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/vocabulary/wire_enums.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::wire {

// Protocol 1: FP8 with per-tensor scales. Protocol 2 adds FP4 codes, scale tensors in the
// payload (TensorHeader fields 12-15) and the FP4 recipes. A daemon reads both; a client learns
// from Welcome whether it may send protocol 2 samples.
inline constexpr std::uint32_t kProtocolVersion = 2;
inline constexpr std::uint32_t kOldestProtocolVersion = 1;
inline constexpr std::uint64_t kMaxChunkBytes = 4u << 20;  // the protocol's largest chunk
// What fp8scoped asks for in Welcome: gRPC holds about a chunk and a flow-control window per
// sending stream, so smaller chunks bound the daemon's memory; 1 MiB is as fast as 4 on loopback.
inline constexpr std::uint64_t kDaemonChunkBytes = 1u << 20;

std::optional<DType> from_wire(v1::DType d);
v1::DType to_wire(DType d);

std::optional<RecipeKind> from_wire(v1::Recipe r);
v1::Recipe to_wire(RecipeKind r);

std::optional<Operand> from_wire(v1::Operand o);
v1::Operand to_wire(Operand o);

std::optional<ScaleLayout> from_wire(v1::ScaleMode m);
v1::ScaleMode to_wire(ScaleLayout l);

std::optional<GemmRole> from_wire(v1::Gemm g);
v1::Gemm to_wire(GemmRole g);

// The oldest protocol that can carry this sample: 2 for FP4 codes or a scale tensor, else 1.
std::uint32_t required_protocol(const v1::TensorHeader& header);

// Label values: "fprop", "dgrad", "wgrad", "unknown"; "x", "w", "dy".
const char* gemm_name(v1::Gemm g);
std::optional<v1::Gemm> gemm_from_name(std::string_view name);
const char* operand_label(v1::Operand o);

}  // namespace fp8scope::wire
