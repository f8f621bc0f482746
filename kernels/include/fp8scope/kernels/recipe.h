// Scaling recipes as plain data (the TE transformer_engine/common/recipe/__init__.py idea): each is
// a struct of formats, margin, history, amax algorithm and block shape. Defaults are TE's; nothing
// is read from the environment. validate() returns the first problem as a Status, never asserts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/recipe_kind.h"

namespace fp8scope {

enum class AmaxAlgo : std::uint8_t { kMax = 1, kMostRecent = 2 };

struct Recipe {
  RecipeKind kind = RecipeKind::kTensorCurrent;
  CastFormat forward_format = CastFormat::kE4M3;
  CastFormat backward_format = CastFormat::kE5M2;
  // Delayed scaling.
  float margin = 0.0f;                // scale = fmax * 2^-margin / amax
  int amax_history_length = 1024;
  AmaxAlgo amax_algo = AmaxAlgo::kMax;
  // Current and block scaling.
  float amax_epsilon = 0.0f;          // amax is clamped up to this before the division
  bool power_of_2_scales = false;     // round each scale down to a power of two
  // Block shape in elements, rows x columns; 0 x 0 is one scale for the whole tensor. Weights may
  // take taller blocks (NVFP4's 16x16); 0 means the same as every operand.
  int block_rows = 0;
  int block_cols = 0;
  int weight_block_rows = 0;
  // NVFP4's options (TE NVFP4BlockScaling), each the what-if of a recipe of its own:
  // the random Hadamard transform of the column-wise copies of X and Dy (hadamard_transform.h);
  // weights are cast as they are.
  bool hadamard = false;
  // 4over6 (TE PR #2972): X's and W's blocks map their amax to 4 or to 6, whichever errs less, under
  // a per-tensor scale from 256 instead of 448 (scale_rules.h).
  bool four_over_six = false;
  // Stochastic rounding of Dy (TE's default for gradients), reported by its expectation.
  bool stochastic_rounding = false;
  // Row-scaled activations (TE PR #2931): each row (token) of X has its own amax for the fp32 scale.
  bool row_scaled = false;
  // The copy each GEMM reads, as TE runs the recipe: fprop and dgrad read X's and Dy's row-wise
  // copies, wgrad their column-wise ones, the only ones TE transforms (common/recipe/__init__.py:
  // 593-594). Without it a transforming recipe stands for the column-wise copies whatever the GEMM.
  bool per_gemm_copy = false;

  CastFormat format_for(Operand op) const { return op == Operand::kDy ? backward_format : forward_format; }
  int block_rows_for(Operand op) const { return op == Operand::kW && weight_block_rows != 0 ? weight_block_rows : block_rows; }
  bool per_tensor() const { return block_rows == 0; }
  // The operand's quantizer applies the transform (to its column-wise copy).
  bool transforms(Operand op) const { return hadamard && op != Operand::kW; }
  // The copy `gemm` reads is transformed (a GEMM of unknown role reads the row-wise copy).
  bool transforms_read(Operand op, GemmRole gemm) const {
    return transforms(op) && (!per_gemm_copy || gemm == GemmRole::kWgrad);
  }
  bool four_over_six_for(Operand op) const { return four_over_six && op != Operand::kDy; }
  bool stochastic_for(Operand op) const { return stochastic_rounding && op == Operand::kDy; }
  bool row_scaled_for(Operand op) const { return row_scaled && op == Operand::kX; }
  // One of NVFP4's options, each a recipe that changes one thing of nvfp4's.
  bool nvfp4_option() const { return hadamard || four_over_six || stochastic_rounding || row_scaled; }
  // FP4 recipes cast to E2M1 whatever the FP8 format asked for.
  bool fp4() const { return forward_format == CastFormat::kE2M1; }
};

// The block heights the engines tile: panels are as tall as the tallest block, and each height
// divides the next (1 | 16 | 32 | 128), so no block straddles two panels.
constexpr bool valid_block_rows(int rows) { return rows == 1 || rows == 16 || rows == 32 || rows == 128; }

std::optional<CastFormat> format_from_name(std::string_view name);

// TE's defaults for each recipe.
Recipe default_recipe(RecipeKind kind);

Status validate(const Recipe& recipe);

// Why Transformer Engine would refuse to cast this operand's tensor (of `dtype`, `cols` wide) with
// `recipe`, or nullopt: a what-if TE cannot run is not computed, and this says why (TE d0067d0).
std::optional<std::string> te_refusal(const Recipe& recipe, Operand op, DType dtype, std::int64_t cols);

}  // namespace fp8scope
