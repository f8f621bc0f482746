#include "fp8scope/kernels/stats_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace fp8scope {

Result<QuantSpec> quant_spec_for(const Recipe& recipe, CastFormat format, Operand operand,
                                 std::optional<float> fixed_scale) {
  if (Status s = validate(recipe); !s.ok()) return s;
  if ((format == CastFormat::kE2M1) != recipe.fp4()) {
    return Status::error(std::string(recipe_name(recipe.kind)) + ": expected " +
                         (recipe.fp4() ? "e2m1" : "an FP8 format") + ", got " + format_name(format));
  }
  QuantSpec spec;
  spec.format = format;
  spec.power_of_2 = recipe.power_of_2_scales;
  spec.epsilon = recipe.amax_epsilon;
  spec.block_rows = recipe.block_rows_for(operand);
  spec.block_cols = recipe.block_cols;
  spec.row_scaled = recipe.row_scaled_for(operand);
  spec.stochastic = recipe.stochastic_for(operand);
  if (fixed_scale && recipe.per_tensor()) {
    if (!std::isfinite(*fixed_scale) || *fixed_scale <= 0.0f) {
      return Status::error(std::string(recipe_name(recipe.kind)) + ": expected a finite scale > 0, got " +
                           std::to_string(*fixed_scale));
    }
    spec.rule = ScaleRule::kTensorFixed;
    spec.fixed_scale = *fixed_scale;
    return spec;
  }
  switch (recipe.kind) {
    case RecipeKind::kTensorCurrent: spec.rule = ScaleRule::kTensorCurrent; break;
    case RecipeKind::kTensorDelayed:
      spec.rule = ScaleRule::kTensorCurrent;
      spec.margin = recipe.margin;
      break;
    case RecipeKind::kMxfp8:
    case RecipeKind::kMxfp8_2d:
    case RecipeKind::kMxfp4: spec.rule = ScaleRule::kBlockE8M0; break;
    case RecipeKind::kBlock1x128:
    case RecipeKind::kBlock128x128: spec.rule = ScaleRule::kBlockCurrent; break;
    case RecipeKind::kNvfp4:
    case RecipeKind::kNvfp4Rht:
    case RecipeKind::kNvfp4Sr:
    case RecipeKind::kNvfp4Row:
    case RecipeKind::kNvfp4Te: spec.rule = ScaleRule::kBlockNvfp4; break;
    case RecipeKind::kNvfp4FourOverSix:
      spec.rule = recipe.four_over_six_for(operand) ? ScaleRule::kBlockNvfp4FourOverSix : ScaleRule::kBlockNvfp4;
      break;
  }
  return spec;
}

BlockRule block_rule_for(const QuantSpec& spec, float tensor_te_amax) {
  tensor_te_amax = spec_amax(spec, tensor_te_amax);
  BlockRule r;
  const float fmax = format_max(spec.format);
  switch (spec.rule) {
    case ScaleRule::kBlockE8M0:
      r.kind = BlockRule::kE8M0;
      r.fmax_reciprocal = 1.0f / fmax;  // TE's Quantized_Limits::max_norm_rcp
      break;
    case ScaleRule::kBlockNvfp4: r = nvfp4_rule(tensor_te_amax); break;
    case ScaleRule::kBlockNvfp4FourOverSix: r = nvfp4_four_over_six_rule(tensor_te_amax); break;
    case ScaleRule::kTensorFixed:
    case ScaleRule::kTensorCurrent:
    case ScaleRule::kBlockCurrent:
      r.kind = BlockRule::kCurrent;
      r.numerator = scaled_max(fmax, spec.margin);
      r.power_of_2 = spec.power_of_2;
      r.epsilon = spec.epsilon;
      break;
  }
  return r;
}

ChannelAxis channel_axis_for(Operand operand) {
  switch (operand) {
    case Operand::kX: return ChannelAxis::kColumns;
    case Operand::kW: return ChannelAxis::kRows;
    default: return ChannelAxis::kNone;
  }
}

Status check_analysis_request(const TensorView& t, std::span<const QuantSpec> specs) {
  if (t.rows <= 0 || t.cols <= 0) {
    return Status::error("expected a nonempty tensor, got " + std::to_string(t.rows) + " x " +
                         std::to_string(t.cols) + " elements");
  }
  if (t.data == nullptr) return Status::error("expected tensor data, got a null pointer");
  if (dtype_info(t.dtype) == nullptr) {
    return Status::error("expected a known dtype, got code " + std::to_string(static_cast<int>(t.dtype)));
  }
  const int align = std::max(1, dtype_bytes(t.dtype));
  if (reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(align) != 0) {
    return Status::error("expected " + std::string(dtype_name(t.dtype)) + " data aligned to " + std::to_string(align) +
                         " bytes");
  }
  if (tensor_bytes(t.dtype, static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols)) == 0) {
    return Status::error("expected " + std::string(dtype_name(t.dtype)) + " rows of whole bytes, got " +
                         std::to_string(t.cols) + " columns");
  }
  if (t.channels > ChannelAxis::kRows) {
    return Status::error("expected a channel axis of none, columns or rows, got code " +
                         std::to_string(static_cast<int>(t.channels)));
  }
  if (specs.size() > static_cast<std::size_t>(kMaxSpecsPerCall)) {
    return Status::error("expected at most " + std::to_string(kMaxSpecsPerCall) + " recipes per tensor, got " +
                         std::to_string(specs.size()));
  }
  for (const QuantSpec& s : specs) {
    if (s.per_block() &&
        (!valid_block_rows(s.block_rows) || s.block_cols < 16 || s.block_cols > 4096 || (s.block_cols & (s.block_cols - 1)) != 0)) {
      return Status::error("expected a block of 1, 16, 32 or 128 rows by a power of two of 16..4096 columns, got " +
                           std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols));
    }
    if (s.rule == ScaleRule::kBlockNvfp4FourOverSix &&
        !(s.format == CastFormat::kE2M1 && s.block_cols == 16 && (s.block_rows == 1 || s.block_rows == 16))) {
      return Status::error("expected 4over6 in E2M1 blocks of 1x16 or 16x16, got " + std::string(format_name(s.format)) +
                           " in " + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols));
    }
    if (s.row_scaled && !(s.rule == ScaleRule::kBlockNvfp4 && s.block_rows == 1)) {
      return Status::error("expected row scaling only for NVFP4 in one-row blocks, got " +
                           std::to_string(s.block_rows) + "-row blocks of rule " + std::to_string(static_cast<int>(s.rule)));
    }
    if (!std::isfinite(s.margin) || s.margin < 0.0f) {
      return Status::error("expected a finite margin >= 0, got " + std::to_string(s.margin));
    }
    if (s.rule == ScaleRule::kTensorFixed && !(std::isfinite(s.fixed_scale) && s.fixed_scale > 0.0f)) {
      return Status::error("expected a finite scale > 0, got " + std::to_string(s.fixed_scale));
    }
  }
  return Status();
}

}  // namespace fp8scope
