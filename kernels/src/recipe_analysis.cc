#include "fp8scope/kernels/recipe_analysis.h"

#include <algorithm>
#include <chrono>

#include "fp8scope/kernels/hadamard_transform.h"

namespace fp8scope {
namespace {

// The specs at `indices` on one tensor, kMaxSpecsPerCall a read; their results go to quant.
// The first read's moments, amax and channels go to *first (when given), its TE amax to *te_amax.
Status analyze_specs(StatsEngine& engine, const TensorView& tensor, const std::vector<QuantSpec>& specs,
                     const std::vector<std::size_t>& indices, std::vector<QuantStats>& quant, TensorAnalysis* first,
                     float* te_amax = nullptr) {
  std::size_t done = 0;
  do {
    const std::size_t n = std::min<std::size_t>(kMaxSpecsPerCall, indices.size() - done);
    std::vector<QuantSpec> chunk;
    for (std::size_t k = 0; k < n; ++k) chunk.push_back(specs[indices[done + k]]);
    TensorAnalysis analysis;
    TensorView view = tensor;
    if (done > 0 || first == nullptr) {  // its moments and channels are not the report's
      view.channels = ChannelAxis::kNone;
      view.amax_only = true;
    }
    if (Status s = engine.analyze(view, chunk, &analysis); !s.ok()) return s;
    for (std::size_t k = 0; k < n; ++k) quant[indices[done + k]] = analysis.quant[k];
    if (done == 0 && te_amax != nullptr) *te_amax = analysis.te_amax;
    if (done == 0 && first != nullptr) *first = std::move(analysis);
    done += n;
  } while (done < indices.size());
  return Status();
}

}  // namespace

std::optional<float> RecipeResult::tensor_scale() const {
  if (!plan.recipe.per_tensor()) return std::nullopt;
  return stats.scale_min;
}

Result<TensorReport> analyze_recipes(StatsEngine& engine, const TensorView& tensor, std::span<const RecipePlan> plans,
                                     double outlier_factor) {
  std::vector<QuantSpec> specs;
  std::vector<std::size_t> direct, transformed;  // which plans read the tensor, which its Hadamard transform
  for (const RecipePlan& p : plans) {
    if (p.given) {
      direct.push_back(specs.size());
      specs.push_back(*p.given);
      continue;
    }
    Result<QuantSpec> spec = quant_spec_for(p.recipe, p.format, p.operand, p.scale);
    if (!spec.ok()) return spec.status();
    (p.recipe.transforms_read(p.operand, p.gemm) ? transformed : direct).push_back(specs.size());
    specs.push_back(spec.value());
  }
  std::vector<QuantStats> quant(specs.size());
  TensorAnalysis analysis;
  const auto start = std::chrono::steady_clock::now();
  // The tensor is read even without a direct spec: its moments and channels are the report's.
  if (Status s = analyze_specs(engine, tensor, specs, direct, quant, &analysis); !s.ok()) return s;
  if (!transformed.empty()) {
    // Each analyzing thread keeps its largest transformed copy (docs/operations.md counts it).
    thread_local HadamardTransformed t;
    hadamard_columns(tensor, t);
    float te_amax = 0.0f;
    if (Status s = analyze_specs(engine, t.view(), specs, transformed, quant, nullptr, &te_amax); !s.ok()) return s;
    for (std::size_t k : transformed) {
      Result<QuantStats> exact = against_exact_transform(tensor, specs[k], te_amax, quant[k]);
      if (!exact.ok()) return exact.status();
      quant[k] = exact.value();
    }
  }
  TensorReport report;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.moments = analysis.moments;
  report.te_amax = analysis.te_amax;
  if (tensor.channels != ChannelAxis::kNone) report.channels = summarize_channels(analysis.channel_amax, outlier_factor);
  for (std::size_t k = 0; k < plans.size(); ++k) report.recipes.push_back({plans[k], specs[k], quant[k]});
  return report;
}

}  // namespace fp8scope
