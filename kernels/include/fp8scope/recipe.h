// Scaling recipes as plain data (the TE transformer_engine/common/recipe/__init__.py idea): each is
// a struct of formats, margin, history, amax algorithm and block shape. Defaults are TE's; nothing
// is read from the environment. validate() returns the first problem as a Status, never asserts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/fp8_format.h"
#include "fp8scope/status.h"

namespace fp8scope {

// Numbered for the wire (proto/fp8scope/v1 mirrors these values).
enum class RecipeKind : std::uint8_t {
  kTensorCurrent = 1,  // TE Float8CurrentScaling: one scale per tensor from this tensor's amax
  kTensorDelayed = 2,  // TE DelayedScaling: one scale per tensor from an amax history
  kMxfp8 = 3,          // TE MXFP8BlockScaling: E8M0 scale per 1x32 row block
  kBlock1x128 = 4,     // TE Float8BlockScaling / DeepSeek-V3 activations: 1x128, power-of-2 scales
  kBlock128x128 = 5,   // TE Float8BlockScaling / DeepSeek-V3 weights: 128x128, power-of-2 scales
};

enum class AmaxAlgo : std::uint8_t { kMax = 1, kMostRecent = 2 };

// Which operand of a GEMM a tensor is; forward operands use the forward format, gradients the
// backward one (TE's HYBRID = E4M3 forward, E5M2 backward).
enum class Operand : std::uint8_t { kX = 1, kW = 2, kDy = 3 };

struct Recipe {
  RecipeKind kind = RecipeKind::kTensorCurrent;
  Fp8Format forward_format = Fp8Format::kE4M3;
  Fp8Format backward_format = Fp8Format::kE5M2;
  // Delayed scaling.
  float margin = 0.0f;                // scale = fmax * 2^-margin / amax
  int amax_history_length = 1024;
  AmaxAlgo amax_algo = AmaxAlgo::kMax;
  // Current and block scaling.
  float amax_epsilon = 0.0f;          // amax is clamped up to this before the division
  bool power_of_2_scales = false;     // round each scale down to a power of two
  // Block shape in elements, rows x columns; 0 x 0 is one scale for the whole tensor.
  int block_rows = 0;
  int block_cols = 0;

  Fp8Format format_for(Operand op) const { return op == Operand::kDy ? backward_format : forward_format; }
  bool per_tensor() const { return block_rows == 0; }
};

// The recipe names fp8scope accepts, in a stable order (the default analysis runs all of them).
inline constexpr RecipeKind kAllRecipeKinds[] = {RecipeKind::kTensorCurrent, RecipeKind::kTensorDelayed,
                                                 RecipeKind::kMxfp8, RecipeKind::kBlock1x128,
                                                 RecipeKind::kBlock128x128};

const char* recipe_name(RecipeKind kind);
std::optional<RecipeKind> recipe_kind_from_name(std::string_view name);
std::optional<Fp8Format> format_from_name(std::string_view name);
std::optional<Operand> operand_from_name(std::string_view name);
const char* operand_name(Operand op);

// TE's defaults for each recipe.
Recipe default_recipe(RecipeKind kind);

Status validate(const Recipe& recipe);

}  // namespace fp8scope
