// Which tensor of a GEMM a sample is (wire Operand): one it reads (X, W, Dy), or the one it writes.
// Forward operands use a recipe's forward format, gradients the backward one (TE's HYBRID = E4M3
// forward, E5M2 backward).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// id, name (a metric label value), wire number, whether a policy that names no operands samples it.
// A GEMM's output is sampled only where asked for (TE's LogTensorStats "output", "dgrad", "wgrad"):
// it is as large as an input and no cast of the job reads it where it is written.
#define FP8SCOPE_OPERANDS(ROW) \
  ROW(X, "x", 1, true)         \
  ROW(W, "w", 2, true)         \
  ROW(Dy, "dy", 3, true)       \
  ROW(Out, "out", 4, false) /* D, what the GEMM wrote, after the call */

enum class Operand : std::uint8_t { FP8SCOPE_OPERANDS(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct OperandTerm {
  Operand value;
  const char* name;
  std::uint32_t wire;
  bool by_default;
};

inline constexpr OperandTerm kOperands[] = {
#define FP8SCOPE_ROW(id, name, wire, by_default) {Operand::k##id, name, wire, by_default},
    FP8SCOPE_OPERANDS(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kOperands));

constexpr const char* operand_name(Operand op) { return vocabulary::name_of(kOperands, op); }
constexpr std::optional<Operand> operand_from_name(std::string_view name) {
  return vocabulary::value_named(kOperands, name);
}
constexpr bool sampled_by_default(Operand op) {
  const OperandTerm* t = vocabulary::row_of(kOperands, op);
  return t != nullptr && t->by_default;
}

// The input a GEMM's output becomes, which its what-ifs are cast as: fprop's output is the next
// layer's activation, dgrad's the gradient of the layer before, wgrad's has the weight's shape.
constexpr Operand analyzed_as(Operand op, GemmRole gemm) {
  if (op != Operand::kOut) return op;
  return gemm == GemmRole::kDgrad ? Operand::kDy : gemm == GemmRole::kWgrad ? Operand::kW : Operand::kX;
}

}  // namespace fp8scope
