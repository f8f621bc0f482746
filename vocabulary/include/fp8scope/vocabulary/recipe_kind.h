// The what-if recipes (wire Recipe); kernels/src/recipe.cc holds each one's rules.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// id, name (a metric label value and what the CLI and policies accept), wire number, whether an
// empty policy runs it; in the stable order fp8scope lists and runs them. mxfp8_2d differs from
// mxfp8 only for weights, and TE's default leaves it off: it runs when asked for. nvfp4_rht reads
// a transformed copy of the tensor (a second read and a BF16 copy of it): it runs when asked for.
// The other NVFP4 options each change one thing of nvfp4's (kernels/src/recipe.cc) and run when
// asked for, so a default run's cost stays that of the seven. nvfp4_te is TE's default NVFP4BlockScaling()
// with every option it turns on, per GEMM: it transforms, so it runs when asked for.
#define FP8SCOPE_RECIPE_KINDS(ROW)                                                                           \
  ROW(TensorCurrent, "tensor_current", 1, true) /* TE Float8CurrentScaling: one scale from this amax */       \
  ROW(TensorDelayed, "tensor_delayed", 2, true) /* TE DelayedScaling: one scale from an amax history */       \
  ROW(Mxfp8, "mxfp8", 3, true)                  /* TE MXFP8BlockScaling: E8M0 scale per 1x32 row block */     \
  ROW(Block1x128, "block_1x128", 4, true)       /* TE Float8BlockScaling / DeepSeek-V3 activations */         \
  ROW(Block128x128, "block_128x128", 5, true)   /* TE Float8BlockScaling / DeepSeek-V3 weights */             \
  ROW(Nvfp4, "nvfp4", 6, true)                  /* TE NVFP4BlockScaling: E2M1, UE4M3 scale per 1x16 (16x16) */ \
  ROW(Mxfp4, "mxfp4", 7, true)                  /* OCP MXFP4: E2M1, E8M0 scale per 1x32 block */              \
  ROW(Mxfp8_2d, "mxfp8_2d", 8, false)           /* MXFP8BlockScaling(enable_2d_quantization): 32x32 weights */ \
  ROW(Nvfp4Rht, "nvfp4_rht", 9, false)          /* nvfp4 after TE's random Hadamard transform of X and Dy */  \
  ROW(Nvfp4FourOverSix, "nvfp4_4over6", 10, false) /* nvfp4, X and W map each block's amax to 4 or to 6 */   \
  ROW(Nvfp4Sr, "nvfp4_sr", 11, false)           /* nvfp4, Dy stochastically rounded (by expectation) */       \
  ROW(Nvfp4Row, "nvfp4_row", 12, false)         /* nvfp4, X scaled by one amax per row (token) */             \
  ROW(Nvfp4Te, "nvfp4_te", 13, false)           /* TE's NVFP4BlockScaling(): each GEMM's copy as TE casts it */

enum class RecipeKind : std::uint8_t { FP8SCOPE_RECIPE_KINDS(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct RecipeKindTerm {
  RecipeKind value;
  const char* name;
  std::uint32_t wire;
  bool by_default;
};

inline constexpr RecipeKindTerm kRecipeKinds[] = {
#define FP8SCOPE_ROW(id, name, wire, by_default) {RecipeKind::k##id, name, wire, by_default},
    FP8SCOPE_RECIPE_KINDS(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kRecipeKinds));

// Every recipe, in that order (the default analysis runs all of them).
inline constexpr auto kAllRecipeKinds = [] {
  std::array<RecipeKind, std::size(kRecipeKinds)> all{};
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = kRecipeKinds[i].value;
  return all;
}();

// The recipes a policy or command that names none runs, in that order.
inline constexpr std::size_t kDefaultRecipeCount = [] {
  std::size_t n = 0;
  for (const RecipeKindTerm& r : kRecipeKinds) n += r.by_default;
  return n;
}();
inline constexpr auto kDefaultRecipeKinds = [] {
  std::array<RecipeKind, kDefaultRecipeCount> kinds{};
  std::size_t n = 0;
  for (const RecipeKindTerm& r : kRecipeKinds) {
    if (r.by_default) kinds[n++] = r.value;
  }
  return kinds;
}();

constexpr const char* recipe_name(RecipeKind kind) { return vocabulary::name_of(kRecipeKinds, kind); }
constexpr std::optional<RecipeKind> recipe_kind_from_name(std::string_view name) {
  return vocabulary::value_named(kRecipeKinds, name);
}
namespace detail {
template <typename Keep>
std::string joined_recipe_names(Keep keep) {
  std::string names;
  for (const RecipeKindTerm& r : kRecipeKinds) {
    if (keep(r)) names += std::string(names.empty() ? "" : ", ") + r.name;
  }
  return names;
}
}  // namespace detail

// "tensor_current, tensor_delayed, ...": every name, in order, for messages.
inline std::string recipe_name_list() {
  return detail::joined_recipe_names([](const RecipeKindTerm&) { return true; });
}
// The recipes a policy or command that names none leaves out, for help texts.
inline std::string off_by_default_recipe_list() {
  return detail::joined_recipe_names([](const RecipeKindTerm& r) { return !r.by_default; });
}

}  // namespace fp8scope
