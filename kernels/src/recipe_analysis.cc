#include "fp8scope/kernels/recipe_analysis.h"

#include <chrono>

namespace fp8scope {

std::optional<float> RecipeResult::tensor_scale() const {
  if (!plan.recipe.per_tensor()) return std::nullopt;
  return stats.scale_min;
}

Result<TensorReport> analyze_recipes(StatsEngine& engine, const TensorView& tensor, std::span<const RecipePlan> plans,
                                     double outlier_factor) {
  std::vector<QuantSpec> specs;
  for (const RecipePlan& p : plans) {
    Result<QuantSpec> spec = quant_spec_for(p.recipe, p.format, p.operand, p.scale);
    if (!spec.ok()) return spec.status();
    specs.push_back(spec.value());
  }
  TensorAnalysis analysis;
  const auto start = std::chrono::steady_clock::now();
  if (Status s = engine.analyze(tensor, specs, &analysis); !s.ok()) return s;
  TensorReport report;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.moments = analysis.moments;
  report.te_amax = analysis.te_amax;
  if (tensor.channels != ChannelAxis::kNone) report.channels = summarize_channels(analysis.channel_amax, outlier_factor);
  for (std::size_t k = 0; k < plans.size(); ++k) report.recipes.push_back({plans[k], specs[k], analysis.quant[k]});
  return report;
}

}  // namespace fp8scope
