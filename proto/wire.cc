#include "fp8scope/wire.h"

namespace fp8scope::wire {

std::optional<DType> from_wire(v1::DType d) {
  if (d >= v1::DTYPE_F32 && d <= v1::DTYPE_E5M2) return static_cast<DType>(d);  // same numbers
  return std::nullopt;
}
v1::DType to_wire(DType d) { return static_cast<v1::DType>(d); }

std::optional<RecipeKind> from_wire(v1::Recipe r) {
  if (r >= v1::RECIPE_TENSOR_CURRENT && r <= v1::RECIPE_BLOCK_128X128) return static_cast<RecipeKind>(r);
  return std::nullopt;
}
v1::Recipe to_wire(RecipeKind r) { return static_cast<v1::Recipe>(r); }

std::optional<Operand> from_wire(v1::Operand o) {
  if (o >= v1::OPERAND_X && o <= v1::OPERAND_DY) return static_cast<Operand>(o);
  return std::nullopt;
}
v1::Operand to_wire(Operand o) { return static_cast<v1::Operand>(o); }

namespace {
struct GemmRow {
  v1::Gemm gemm;
  const char* name;
};
constexpr GemmRow kGemms[] = {
    {v1::GEMM_FPROP, "fprop"}, {v1::GEMM_DGRAD, "dgrad"}, {v1::GEMM_WGRAD, "wgrad"}, {v1::GEMM_UNKNOWN, "unknown"}};
}  // namespace

const char* gemm_name(v1::Gemm g) {
  for (const auto& row : kGemms) {
    if (row.gemm == g) return row.name;
  }
  return "unknown";
}

std::optional<v1::Gemm> gemm_from_name(std::string_view name) {
  for (const auto& row : kGemms) {
    if (name == row.name) return row.gemm;
  }
  return std::nullopt;
}

const char* operand_label(v1::Operand o) {
  const std::optional<Operand> op = from_wire(o);
  return op ? operand_name(*op) : "unknown";
}

}  // namespace fp8scope::wire
