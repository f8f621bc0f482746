// One tensor through several recipes: resolve each recipe to a QuantSpec, run the engine once, and
// keep the results next to the recipe that produced them. Shared by `fp8scope analyze` and the
// daemon, so both report the same numbers for the same tensor.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "fp8scope/kernels/channel_summary.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

struct RecipePlan {
  Recipe recipe;
  CastFormat format = CastFormat::kE4M3;
  Operand operand = Operand::kX;  // which block shape applies (NVFP4 weights take 16x16)
  std::optional<float> scale;     // per-tensor recipes: a scale under study (e.g. delayed scaling's)
  // A spec given whole instead of the recipe's (a job's own cast, with the options, scale and amax
  // it used); `recipe` then only names it.
  std::optional<QuantSpec> given;
  GemmRole gemm = GemmRole::kUnknown;  // the GEMM that reads it: which copy a per-GEMM recipe casts
};

struct RecipeResult {
  RecipePlan plan;
  QuantSpec spec;
  QuantStats stats;
  // The one scale a per-tensor recipe applied; nullopt for block recipes (see stats.scale_min/max).
  std::optional<float> tensor_scale() const;
};

struct TensorReport {
  TensorMoments moments;
  float te_amax = 0.0f;
  std::vector<RecipeResult> recipes;
  ChannelSummary channels;  // of TensorView::channels' amaxes; channels 0 for none
  double seconds = 0.0;  // wall time of the engine call
};

// Outlier channels are those above outlier_factor x the median channel amax.
Result<TensorReport> analyze_recipes(StatsEngine& engine, const TensorView& tensor, std::span<const RecipePlan> plans,
                                     double outlier_factor = kDefaultOutlierChannelFactor);

}  // namespace fp8scope
