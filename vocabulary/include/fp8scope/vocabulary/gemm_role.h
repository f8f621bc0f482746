// The GEMM a sample came from (wire Gemm). Roles from the layout (DESIGN.md): TN fprop (A = W,
// B = X), NN dgrad (A = W, B = Dy), NT wgrad (A = X, B = Dy).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// id, name (a metric label value), wire number.
#define FP8SCOPE_GEMM_ROLES(ROW) \
  ROW(Fprop, "fprop", 1)         \
  ROW(Dgrad, "dgrad", 2)         \
  ROW(Wgrad, "wgrad", 3)         \
  ROW(Unknown, "unknown", 4) /* a GEMM whose role could not be told from its layout */

enum class GemmRole : std::uint8_t { FP8SCOPE_GEMM_ROLES(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct GemmRoleTerm {
  GemmRole value;
  const char* name;
  std::uint32_t wire;
};

inline constexpr GemmRoleTerm kGemmRoles[] = {
#define FP8SCOPE_ROW(id, name, wire) {GemmRole::k##id, name, wire},
    FP8SCOPE_GEMM_ROLES(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kGemmRoles));

constexpr const char* gemm_name(GemmRole g) { return vocabulary::name_of(kGemmRoles, g); }
constexpr std::optional<GemmRole> gemm_from_name(std::string_view name) {
  return vocabulary::value_named(kGemmRoles, name);
}

}  // namespace fp8scope
