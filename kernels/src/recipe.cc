#include "fp8scope/kernels/recipe.h"

#include <cmath>
#include <string>
#include <utility>

namespace fp8scope {
namespace {

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// The NVFP4 family: E2M1 in 1x16 blocks, 16x16 for weights, each recipe one of TE's options
// (TE d0067d0, transformer_engine/common/recipe/__init__.py; pytorch/quantization.py). nvfp4 is
// NVFP4BlockScaling(disable_rht=True, disable_stochastic_rounding=True), the 2-D weight blocks of
// fp4_quant_fwd_weight's fp4_2d_quantization (recipe/__init__.py:600); each other recipe changes
// what its comment below says.
void set_nvfp4_family(Recipe& r) {
  const RecipeKind kind = r.kind;
  r.forward_format = r.backward_format = CastFormat::kE2M1;
  r.block_rows = 1;
  r.block_cols = 16;
  r.weight_block_rows = 16;
  // nvfp4_rht: NVFP4BlockScaling(disable_stochastic_rounding=True), its default random Hadamard
  // transform kept (recipe/__init__.py:593-609): X's and Dy's column-wise copies are transformed
  // (hadamard_transform.h) and cast in 1x16 blocks along the tokens; weights are nvfp4's.
  // nvfp4_te: NVFP4BlockScaling() as TE's defaults run it (recipe/__init__.py:595-609): X's and
  // Dy's column-wise copies, wgrad's operands, transformed; Dy stochastically rounded, both its
  // copies (pytorch/csrc/quantizer.cpp:2557); W in 16x16 blocks; fprop and dgrad read the
  // row-wise copies, untransformed. So "what NVFP4 would do" is what TE's default does.
  r.hadamard = kind == RecipeKind::kNvfp4Rht || kind == RecipeKind::kNvfp4Te;
  r.per_gemm_copy = kind == RecipeKind::kNvfp4Te;
  // nvfp4_4over6: NVFP4BlockScaling(nvfp4_4over6="all", disable_rht=True,
  // disable_stochastic_rounding=True), PR #2972: every forward tensor, X and W, never a gradient
  // (quantization.py:1702-1709), picks per block between mapping its amax to 4 and to 6, under a
  // per-tensor scale from E4M3_MAX 256 (nvfp4_4over6_e4m3_use_256="all", recipe/__init__.py:
  // 564-566; quantization.py:1720-1729) by the default MAE criterion (scale_rules.h). 4over6 refuses
  // RHT (quantization.py:1714-1719), so X is cast as it is.
  r.four_over_six = kind == RecipeKind::kNvfp4FourOverSix;
  // nvfp4_sr: NVFP4BlockScaling(disable_rht=True): stochastic rounding, on by default, rounds the
  // gradients only (recipe/__init__.py:559-561, 597-607), both their copies.
  r.stochastic_rounding = kind == RecipeKind::kNvfp4Sr || kind == RecipeKind::kNvfp4Te;
  // nvfp4_row: NVFP4BlockScaling(row_scaled_activation=True, disable_rht=True,
  // disable_stochastic_rounding=True), PR #2931: the forward input X takes one amax per row (token)
  // for its fp32 scale (recipe/__init__.py:563, quantization.py:1738-1742, tensor/nvfp4_tensor.py:
  // 395); this models X's row-wise copy, the one fprop reads.
  r.row_scaled = kind == RecipeKind::kNvfp4Row;
}

}  // namespace

std::optional<CastFormat> format_from_name(std::string_view name) {
  for (CastFormat f : kAllCastFormats) {
    if (name == format_name(f)) return f;
  }
  return std::nullopt;
}

Recipe default_recipe(RecipeKind kind) {
  Recipe r;
  r.kind = kind;
  switch (kind) {
    case RecipeKind::kTensorCurrent:  // Float8CurrentScaling(fp8_format=HYBRID)
    case RecipeKind::kTensorDelayed:  // DelayedScaling(margin=0, HYBRID, 1024, "max")
      break;
    case RecipeKind::kMxfp8:  // MXFP8BlockScaling(fp8_format=E4M3)
      r.backward_format = CastFormat::kE4M3;
      r.block_rows = 1;
      r.block_cols = 32;
      break;
    // MXFP8BlockScaling(enable_2d_quantization=True) (TE d0067d0, PR #2634:
    // transformer_engine/common/recipe/__init__.py:373): forward weights only
    // (pytorch/quantization.py:1536-1548) take one E8M0 scale per 32x32 block, from the same
    // float_to_e8m0(amax * max_norm_rcp) as 1x32 (common/cast/mxfp8/quantize_mxfp8.cuh:440-446);
    // activations and gradients stay 1x32.
    case RecipeKind::kMxfp8_2d:
      r.backward_format = CastFormat::kE4M3;
      r.block_rows = 1;
      r.block_cols = 32;
      r.weight_block_rows = 32;
      break;
    case RecipeKind::kBlock1x128:  // Float8BlockScaling(fp8_format=E4M3), 1-D blocks
      r.backward_format = CastFormat::kE4M3;
      r.power_of_2_scales = true;
      r.block_rows = 1;
      r.block_cols = 128;
      break;
    case RecipeKind::kBlock128x128:  // Float8BlockScaling(fp8_format=E4M3), 2-D blocks
      r.backward_format = CastFormat::kE4M3;
      r.power_of_2_scales = true;
      r.block_rows = 128;
      r.block_cols = 128;
      break;
    case RecipeKind::kNvfp4:
    case RecipeKind::kNvfp4Rht:
    case RecipeKind::kNvfp4FourOverSix:
    case RecipeKind::kNvfp4Sr:
    case RecipeKind::kNvfp4Row:
    case RecipeKind::kNvfp4Te:
      set_nvfp4_family(r);
      break;
    case RecipeKind::kMxfp4:  // OCP MX E2M1 with an E8M0 scale per 1x32 block, rounded up as TE's MX casts
      r.forward_format = r.backward_format = CastFormat::kE2M1;
      r.block_rows = 1;
      r.block_cols = 32;
      break;
  }
  return r;
}

Status validate(const Recipe& r) {
  const std::string name = recipe_name(r.kind);
  if (name == "invalid") {
    return Status::error("recipe: expected one of " + recipe_name_list() + ", got kind " +
                         std::to_string(static_cast<int>(r.kind)));
  }
  if (!std::isfinite(r.margin) || r.margin < 0.0f || r.margin > 64.0f) {
    return Status::error(name + ": expected margin in [0, 64], got " + std::to_string(r.margin));
  }
  if (r.amax_history_length < 1 || r.amax_history_length > 1 << 20) {
    return Status::error(name + ": expected amax_history_length in [1, 1048576], got " +
                         std::to_string(r.amax_history_length));
  }
  if (r.amax_algo != AmaxAlgo::kMax && r.amax_algo != AmaxAlgo::kMostRecent) {
    return Status::error(name + ": expected amax algorithm max or most_recent");
  }
  if (!std::isfinite(r.amax_epsilon) || r.amax_epsilon < 0.0f) {
    return Status::error(name + ": expected amax_epsilon >= 0, got " + std::to_string(r.amax_epsilon));
  }
  const bool wants_blocks = r.kind != RecipeKind::kTensorCurrent && r.kind != RecipeKind::kTensorDelayed;
  if (!wants_blocks) {
    if (r.block_rows != 0 || r.block_cols != 0 || r.weight_block_rows != 0) {
      return Status::error(name + ": expected no block shape for a per-tensor recipe, got " +
                           std::to_string(r.block_rows) + "x" + std::to_string(r.block_cols));
    }
    if (r.forward_format == CastFormat::kE2M1 || r.backward_format == CastFormat::kE2M1) {
      return Status::error(name + ": expected FP8 formats, got e2m1");
    }
    return Status();
  }
  // The engines tile rows in 4096-column segments and panels of 16, 32 or 128 rows; blocks must fit.
  if (!valid_block_rows(r.block_rows) || (r.weight_block_rows != 0 && !valid_block_rows(r.weight_block_rows))) {
    return Status::error(name + ": expected block rows 1, 16, 32 or 128, got " + std::to_string(r.block_rows) +
                         (r.weight_block_rows ? " (weights " + std::to_string(r.weight_block_rows) + ")" : ""));
  }
  // The NVFP4 options name the recipe: each is its kind's, never added to another.
  const Recipe base = default_recipe(r.kind);
  const bool fp4_recipe = base.fp4();
  const std::pair<bool Recipe::*, const char*> options[] = {{&Recipe::hadamard, "the Hadamard transform"},
                                                            {&Recipe::four_over_six, "4over6"},
                                                            {&Recipe::stochastic_rounding, "stochastic rounding"},
                                                            {&Recipe::row_scaled, "row scaling"},
                                                            {&Recipe::per_gemm_copy, "per-GEMM copies"}};
  for (const auto& [option, what] : options) {
    if (r.*option != base.*option) {
      return Status::error(name + ": expected " + what + " " + (base.*option ? "on" : "off") + ", as the recipe defines it");
    }
  }
  const int fp4_formats = (r.forward_format == CastFormat::kE2M1) + (r.backward_format == CastFormat::kE2M1);
  if (fp4_recipe && fp4_formats != 2) return Status::error(name + ": expected e2m1 elements forward and backward");
  if (!fp4_recipe && fp4_formats != 0) return Status::error(name + ": expected FP8 formats, got e2m1");
  if (!is_power_of_two(r.block_cols) || r.block_cols < 16 || r.block_cols > 4096) {
    return Status::error(name + ": expected block columns a power of two in [16, 4096], got " +
                         std::to_string(r.block_cols));
  }
  return Status();
}

std::optional<std::string> te_refusal(const Recipe& r, Operand op, DType dtype, std::int64_t cols) {
  const std::string name = recipe_name(r.kind);
  // pytorch/csrc/quantizer.cpp:2631-2633 (and common/hadamard_transform/hadamard_transform.cu:497-498).
  if (r.transforms(op) && dtype != DType::kBF16) {
    return name + ": TE's random Hadamard transform takes BF16 input only (pytorch/csrc/quantizer.cpp:2631-2633); this "
                  "tensor is " + dtype_name(dtype);
  }
  // pytorch/csrc/quantizer.cpp:2572-2580: row-scaled NVFP4 needs a last dimension divisible by 16.
  if (r.row_scaled_for(op) && cols % 16 != 0) {
    return name + ": TE's row-scaled NVFP4 needs a last dimension divisible by 16 (pytorch/csrc/quantizer.cpp:2572-2580); "
                  "this tensor has " + std::to_string(cols) + " columns";
  }
  return std::nullopt;
}

}  // namespace fp8scope
