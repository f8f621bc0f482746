// Conversions between the wire enums (proto/fp8scope/v1) and fp8scope's own types and names, so
// the daemon, the shipper and the CLI spell every label the same way.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fp8scope/dtype.h"
#include "fp8scope/recipe.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::wire {

inline constexpr std::uint32_t kProtocolVersion = 1;
inline constexpr std::uint64_t kMaxChunkBytes = 4u << 20;

std::optional<DType> from_wire(v1::DType d);
v1::DType to_wire(DType d);

std::optional<RecipeKind> from_wire(v1::Recipe r);
v1::Recipe to_wire(RecipeKind r);

std::optional<Operand> from_wire(v1::Operand o);
v1::Operand to_wire(Operand o);

// Label values: "fprop", "dgrad", "wgrad", "unknown"; "x", "w", "dy".
const char* gemm_name(v1::Gemm g);
std::optional<v1::Gemm> gemm_from_name(std::string_view name);
const char* operand_label(v1::Operand o);

}  // namespace fp8scope::wire
