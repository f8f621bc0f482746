#include "fp8scope/analysis/sample_analysis.h"

#include <cmath>
#include <cstdio>

#include "fp8scope/kernels/code_digest.h"
#include "fp8scope/kernels/observed_analysis.h"
#include "fp8scope/kernels/recipe_analysis.h"

namespace fp8scope::server {
namespace {

std::string hex_digest(std::uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

PaddingCensus padding_census(const Sample& s) {
  PaddingCensus c;
  if (s.header.valid_rows <= 0) return c;
  const std::size_t first = static_cast<std::size_t>(s.header.valid_rows * s.header.cols);
  const std::size_t end = static_cast<std::size_t>(s.header.numel());
  for (std::size_t i = first; i < end; ++i) {
    const float v = load_element(s.payload.data(), i, s.header.dtype, 1.0f);
    c.nonfinite += !std::isfinite(v);
    c.nonzero += v != 0.0f;  // NaN counts as both
  }
  c.values = end - first;
  return c;
}

std::vector<RecipeKind> policy_recipes(const SamplingPolicy& p) {
  if (!p.recipes.empty()) return p.recipes;
  return std::vector<RecipeKind>(kDefaultRecipeKinds.begin(), kDefaultRecipeKinds.end());
}

// By job, run, rank, layer, expert, gemm and operand: one quantized tensor.
std::string tensor_key(const Sample& s) {
  return s.client->job + '\x1f' + s.client->run + '\x1f' + std::to_string(s.client->rank) + '\x1f' + s.header.layer +
         '\x1f' + (s.header.expert ? std::to_string(*s.header.expert) : "") + '\x1f' + gemm_name(s.header.gemm) +
         '\x1f' + operand_name(s.header.operand);
}

}  // namespace

Result<SampleAnalysis> SampleAnalyzer::analyze(const Sample& s, const SamplingPolicy& policy) {
  Result<SampleAnalysis> a = dtype_is_codes(s.header.dtype) ? observed(s) : what_ifs(s, policy);
  if (a.ok()) a.value().padding = padding_census(s);
  return a;
}

std::shared_ptr<DelayedScalingState> SampleAnalyzer::delayed_state(const Sample& s, const Recipe& recipe,
                                                                   CastFormat format) {
  const std::string key = tensor_key(s) + '\x1f' + std::to_string(static_cast<int>(format));
  std::lock_guard<std::mutex> lock(delayed_mu_);
  return delayed_.get_or_insert(key, [&] { return std::make_shared<DelayedScalingState>(recipe, format); });
}

std::vector<std::uint32_t> SampleAnalyzer::persistent_channels(const Sample& s, const std::vector<std::uint32_t>& outliers) {
  std::lock_guard<std::mutex> lock(channels_mu_);
  return channels_.get_or_insert(tensor_key(s), [&] { return ChannelPersistence(channel_options_.window); }).add(outliers);
}

Result<SampleAnalysis> SampleAnalyzer::what_ifs(const Sample& s, const SamplingPolicy& policy) {
  const Operand operand = s.header.operand;
  const TensorView view{s.payload.data(), s.header.dtype, s.header.analyzed_rows(), s.header.cols, 1.0f,
                        channel_axis_for(operand)};
  std::vector<RecipePlan> plans;
  std::vector<std::shared_ptr<DelayedScalingState>> delayed;
  for (RecipeKind kind : policy_recipes(policy)) {
    RecipePlan p;
    p.recipe = default_recipe(kind);
    p.format = p.recipe.format_for(operand);
    p.operand = operand;
    std::shared_ptr<DelayedScalingState> state;
    if (kind == RecipeKind::kTensorDelayed) {
      state = delayed_state(s, p.recipe, p.format);
      p.scale = state->scale();
    }
    plans.push_back(p);
    delayed.push_back(std::move(state));
  }
  Result<TensorReport> report = analyze_recipes(engine_, view, plans, channel_options_.factor);
  if (!report.ok()) return report.status();
  SampleAnalysis a;
  a.moments = report.value().moments;
  a.te_amax = report.value().te_amax;
  a.channels = report.value().channels;
  if (a.channels.channels > 0) a.channels.persistent = persistent_channels(s, a.channels.outliers);
  for (std::size_t k = 0; k < report.value().recipes.size(); ++k) {
    const RecipeResult& r = report.value().recipes[k];
    if (delayed[k] != nullptr) delayed[k]->update(a.te_amax);  // this step's amax joins the history
    RecipeOutcome o;
    o.caster = Caster::recipe(r.plan.recipe.kind);
    o.format = r.plan.format;
    o.scale = r.tensor_scale();
    o.scale_min = r.stats.scale_min;
    o.scale_max = r.stats.scale_max;
    o.stats = r.stats;
    // The codes a weight's per-tensor current cast would write (the scale a PTQ export or TE would
    // choose), for the inference check.
    if (operand == Operand::kW && r.plan.recipe.kind == RecipeKind::kTensorCurrent && o.scale) {
      o.codes_digest = hex_digest(quantized_code_digest(view, o.format, static_cast<float>(*o.scale)));
    }
    a.recipes.push_back(std::move(o));
  }
  return a;
}

Result<SampleAnalysis> SampleAnalyzer::observed(const Sample& s) {
  ObservedTensor t;
  t.codes = s.payload.data();
  t.dtype = s.header.dtype;
  t.shape = {s.header.analyzed_rows(), s.header.cols, s.header.k_is_outer};
  t.layout = s.header.scale_layout;
  t.scales = std::span<const std::uint8_t>(s.payload.data() + s.header.codes_bytes, s.payload.size() - s.header.codes_bytes);
  // Token rows of a padded expert: their scales lead the tensor (validation allows no other layout).
  if (s.header.valid_rows > 0 && is_block_layout(t.layout)) t.scales = t.scales.first(scale_tensor_bytes(t.layout, t.shape));
  const float per_tensor = s.header.scale_layout == ScaleLayout::kTensorScalar ? s.header.scale_inv
                                                                        : s.header.global_scale_inv;
  t.scale_inv = per_tensor > 0.0f ? per_tensor : 1.0f;  // 0: not given
  Result<ObservedAnalysis> analyzed = engine_.analyze_observed(t);
  if (!analyzed.ok()) return analyzed.status();
  SampleAnalysis a;
  a.moments = analyzed.value().moments;
  a.te_amax = analyzed.value().te_amax;
  RecipeOutcome o;
  o.caster = Caster::job();
  o.format = code_format(s.header.dtype);
  o.scale_layout = s.header.scale_layout;
  o.stats = analyzed.value().stats;
  o.scale_min = o.stats.scale_min;
  o.scale_max = o.stats.scale_max;
  if (s.header.scale_layout == ScaleLayout::kTensorScalar) o.scale = o.scale_min = o.scale_max = 1.0 / t.scale_inv;
  // Fingerprints of the job's own FP8 codes, for the inference check.
  const std::uint64_t analyzed_bytes =
      tensor_bytes(s.header.dtype, static_cast<std::uint64_t>(s.header.analyzed_rows()), static_cast<std::uint64_t>(s.header.cols));
  o.codes_digest = hex_digest(code_digest(std::span<const std::uint8_t>(s.payload.data(), analyzed_bytes)));
  a.recipes.push_back(std::move(o));
  return a;
}

}  // namespace fp8scope::server
