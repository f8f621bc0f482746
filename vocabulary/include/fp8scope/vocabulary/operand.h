// Which operand of a GEMM a tensor is (wire Operand). Forward operands use a recipe's forward
// format, gradients the backward one (TE's HYBRID = E4M3 forward, E5M2 backward).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// id, name (a metric label value), wire number.
#define FP8SCOPE_OPERANDS(ROW) \
  ROW(X, "x", 1)               \
  ROW(W, "w", 2)               \
  ROW(Dy, "dy", 3)

enum class Operand : std::uint8_t { FP8SCOPE_OPERANDS(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct OperandTerm {
  Operand value;
  const char* name;
  std::uint32_t wire;
};

inline constexpr OperandTerm kOperands[] = {
#define FP8SCOPE_ROW(id, name, wire) {Operand::k##id, name, wire},
    FP8SCOPE_OPERANDS(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kOperands));

constexpr const char* operand_name(Operand op) { return vocabulary::name_of(kOperands, op); }
constexpr std::optional<Operand> operand_from_name(std::string_view name) {
  return vocabulary::value_named(kOperands, name);
}

}  // namespace fp8scope
