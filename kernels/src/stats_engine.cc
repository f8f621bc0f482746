#include "fp8scope/stats_engine.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace fp8scope {

Result<QuantSpec> quant_spec_for(const Recipe& recipe, Fp8Format format, std::optional<float> fixed_scale) {
  if (Status s = validate(recipe); !s.ok()) return s;
  QuantSpec spec;
  spec.format = format;
  spec.power_of_2 = recipe.power_of_2_scales;
  spec.epsilon = recipe.amax_epsilon;
  spec.block_rows = recipe.block_rows;
  spec.block_cols = recipe.block_cols;
  if (fixed_scale && recipe.per_tensor()) {
    if (!std::isfinite(*fixed_scale) || *fixed_scale <= 0.0f) {
      return Status::error(std::string(recipe_name(recipe.kind)) + ": expected a finite scale > 0, got " +
                           std::to_string(*fixed_scale));
    }
    spec.mode = ScaleMode::kTensorFixed;
    spec.fixed_scale = *fixed_scale;
    return spec;
  }
  switch (recipe.kind) {
    case RecipeKind::kTensorCurrent: spec.mode = ScaleMode::kTensorCurrent; break;
    case RecipeKind::kTensorDelayed:
      spec.mode = ScaleMode::kTensorCurrent;
      spec.margin = recipe.margin;
      break;
    case RecipeKind::kMxfp8: spec.mode = ScaleMode::kBlockE8M0; break;
    case RecipeKind::kBlock1x128:
    case RecipeKind::kBlock128x128: spec.mode = ScaleMode::kBlockCurrent; break;
  }
  return spec;
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
  if (reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(dtype_bytes(t.dtype)) != 0) {
    return Status::error("expected " + std::string(dtype_name(t.dtype)) + " data aligned to " +
                         std::to_string(dtype_bytes(t.dtype)) + " bytes");
  }
  if (specs.size() > static_cast<std::size_t>(kMaxSpecsPerCall)) {
    return Status::error("expected at most " + std::to_string(kMaxSpecsPerCall) + " recipes per tensor, got " +
                         std::to_string(specs.size()));
  }
  for (const QuantSpec& s : specs) {
    const bool block = s.mode == ScaleMode::kBlockE8M0 || s.mode == ScaleMode::kBlockCurrent;
    if (block && ((s.block_rows != 1 && s.block_rows != 128) || s.block_cols < 16 || s.block_cols > 4096 ||
                  (s.block_cols & (s.block_cols - 1)) != 0)) {
      return Status::error("expected a block of 1 or 128 rows by a power of two of 16..4096 columns, got " +
                           std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols));
    }
    if (!std::isfinite(s.margin) || s.margin < 0.0f) {
      return Status::error("expected a finite margin >= 0, got " + std::to_string(s.margin));
    }
    if (s.mode == ScaleMode::kTensorFixed && !(std::isfinite(s.fixed_scale) && s.fixed_scale > 0.0f)) {
      return Status::error("expected a finite scale > 0, got " + std::to_string(s.fixed_scale));
    }
  }
  return Status();
}

}  // namespace fp8scope
