#include "fp8scope/analysis/sample_analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "fp8scope/analysis/cast_analysis.h"
#include "fp8scope/kernels/cast_check.h"
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
  Result<SampleAnalysis> a = s.header.cast ? cast(s, policy) : dtype_is_codes(s.header.dtype) ? observed(s) : what_ifs(s, policy);
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

// A what-if TE would refuse is not computed: said once per reason in the log, as the policy that
// asks for it holds for every sample.
void SampleAnalyzer::refused_once(const std::string& why) {
  std::lock_guard<std::mutex> lock(refused_mu_);
  if (refused_.size() < 64 && refused_.insert(why).second) spdlog::info("what-if not computed: {}", why);
}

void SampleAnalyzer::add_what_if_plans(const Sample& s, const SamplingPolicy& policy, const TensorView& view,
                                       std::vector<RecipePlan>& plans,
                                       std::vector<std::shared_ptr<DelayedScalingState>>& delayed) {
  // A GEMM output is cast as the input it becomes.
  const Operand operand = analyzed_as(s.header.operand, s.header.gemm);
  for (RecipeKind kind : policy_recipes(policy)) {
    RecipePlan p;
    p.recipe = default_recipe(kind);
    if (const std::optional<std::string> why = te_refusal(p.recipe, operand, view.dtype, view.cols)) {
      refused_once(*why);
      continue;
    }
    p.format = p.recipe.format_for(operand);
    p.operand = operand;
    p.gemm = s.header.gemm;
    std::shared_ptr<DelayedScalingState> state;
    if (kind == RecipeKind::kTensorDelayed) {
      state = delayed_state(s, p.recipe, p.format);
      p.scale = state->scale();
    }
    plans.push_back(p);
    delayed.push_back(std::move(state));
  }
}

void SampleAnalyzer::add_what_ifs(const Sample& s, const TensorView& view, const TensorReport& report, std::size_t first,
                                  const std::vector<std::shared_ptr<DelayedScalingState>>& delayed, SampleAnalysis& a) {
  a.moments = report.moments;
  a.te_amax = report.te_amax;
  a.channels = report.channels;
  if (a.channels.channels > 0) a.channels.persistent = persistent_channels(s, a.channels.outliers);
  for (std::size_t k = first; k < report.recipes.size(); ++k) {
    const RecipeResult& r = report.recipes[k];
    if (delayed[k] != nullptr) delayed[k]->update(a.te_amax);  // this step's amax joins the history
    RecipeOutcome o;
    o.caster = Caster::recipe(r.plan.recipe.kind);
    o.format = r.plan.format;
    o.scale = r.tensor_scale();
    o.scale_min = r.stats.scale_min;
    o.scale_max = r.stats.scale_max;
    o.stats = r.stats;
    o.source = s.header.cast ? (s.header.cast->recomputed() ? DataSource::kRecomputed : DataSource::kCastInput)
                             : DataSource::kGemmOperand;
    // The codes a weight's per-tensor current cast would write (the scale a PTQ export or TE would
    // choose), for the inference check.
    if (s.header.operand == Operand::kW && r.plan.recipe.kind == RecipeKind::kTensorCurrent && o.scale) {
      o.codes_digest = hex_digest(quantized_code_digest(view, o.format, static_cast<float>(*o.scale)));
    }
    a.recipes.push_back(std::move(o));
  }
}

Result<SampleAnalysis> SampleAnalyzer::what_ifs(const Sample& s, const SamplingPolicy& policy) {
  const TensorView view{s.payload.data(), s.header.dtype, s.header.analyzed_rows(), s.header.cols, 1.0f,
                        channel_axis_for(analyzed_as(s.header.operand, s.header.gemm))};
  std::vector<RecipePlan> plans;
  std::vector<std::shared_ptr<DelayedScalingState>> delayed;
  add_what_if_plans(s, policy, view, plans, delayed);
  Result<TensorReport> report = analyze_recipes(engine_, view, plans, channel_options_.factor);
  if (!report.ok()) return report.status();
  SampleAnalysis a;
  add_what_ifs(s, view, report.value(), 0, delayed, a);
  a.block_ranges = block_dynamic_ranges(view, policy.block_ranges);
  return a;
}

namespace {

// The job's codes as the observed analysis reads them, with the scales its GEMM read.
ObservedTensor observed_tensor(const Sample& s) {
  ObservedTensor t;
  t.codes = s.payload.data();
  t.dtype = s.header.dtype;
  t.shape = {s.header.analyzed_rows(), s.header.cols, s.header.k_is_outer};
  t.layout = s.header.scale_layout;
  t.scales = std::span<const std::uint8_t>(s.payload.data() + s.header.codes_bytes, s.header.scale_bytes);
  if (s.header.scale_layout == ScaleLayout::kTensorScalar) t.scales = {};
  // Token rows of a padded expert: their scales lead the tensor (validation allows no other layout).
  if (s.header.valid_rows > 0 && is_block_layout(t.layout)) t.scales = t.scales.first(scale_tensor_bytes(t.layout, t.shape));
  const float per_tensor = s.header.scale_layout == ScaleLayout::kTensorScalar ? s.header.scale_inv
                                                                        : s.header.global_scale_inv;
  t.scale_inv = per_tensor > 0.0f ? per_tensor : 1.0f;  // 0: not given
  return t;
}

// The job's outcome from its codes: the scale it used, the codes' fingerprint for the inference check.
RecipeOutcome job_outcome(const Sample& s, const ObservedTensor& t, const QuantStats& stats) {
  RecipeOutcome o;
  o.caster = Caster::job();
  o.format = code_format(s.header.dtype);
  o.scale_layout = s.header.scale_layout;
  o.stats = stats;
  o.scale_min = o.stats.scale_min;
  o.scale_max = o.stats.scale_max;
  o.source = DataSource::kCodes;
  if (s.header.scale_layout == ScaleLayout::kTensorScalar) o.scale = o.scale_min = o.scale_max = 1.0 / t.scale_inv;
  const std::uint64_t analyzed_bytes =
      tensor_bytes(s.header.dtype, static_cast<std::uint64_t>(s.header.analyzed_rows()), static_cast<std::uint64_t>(s.header.cols));
  o.codes_digest = hex_digest(code_digest(std::span<const std::uint8_t>(s.payload.data(), analyzed_bytes)));
  return o;
}

}  // namespace

Result<SampleAnalysis> SampleAnalyzer::observed(const Sample& s) {
  const ObservedTensor t = observed_tensor(s);
  Result<ObservedAnalysis> analyzed = engine_.analyze_observed(t);
  if (!analyzed.ok()) return analyzed.status();
  SampleAnalysis a;
  a.moments = analyzed.value().moments;
  a.te_amax = analyzed.value().te_amax;
  a.recipes.push_back(job_outcome(s, t, analyzed.value().stats));
  const ScaleLayoutTerm* layout = scale_layout_info(s.header.scale_layout);
  a.relative_values = layout != nullptr && layout->relative_values(s.header.global_scale_inv > 0.0f);
  return a;
}

Result<SampleAnalysis> SampleAnalyzer::cast(const Sample& s, const SamplingPolicy& policy) {
  const std::span<const std::uint8_t> part = cast_part(s);
  const CastScalars scalars = cast_scalars(part);
  // The no-op flag was set: the cast wrote nothing, so the codes are an earlier cast's, of another
  // input. What the codes show holds; their error against this input does not.
  if (scalars.noop == 1.0f) {
    Result<SampleAnalysis> a = observed(s);
    if (a.ok()) a.value().cast_noop = true;
    return a;
  }
  Result<CastTensor> hp = cast_tensor(s.header, part);
  if (!hp.ok()) return hp.status();
  const ObservedTensor codes = observed_tensor(s);
  Result<CastElements> job = observed_elements(codes);
  if (!job.ok()) return job.status();
  Result<ObservedAnalysis> scales = engine_.analyze_observed(codes);
  if (!scales.ok()) return scales.status();
  const JobCast jc = job_cast(s.header, scalars);
  // The job's cast first (its model's statistics on the input), then the policy's what-ifs.
  std::vector<RecipePlan> plans;
  std::vector<std::shared_ptr<DelayedScalingState>> delayed;
  RecipePlan own;
  own.recipe = default_recipe(jc.recipe);
  own.format = jc.spec.format;
  own.operand = s.header.operand;
  own.given = jc.spec;
  plans.push_back(own);
  delayed.push_back(nullptr);
  const TensorView view = hp.value().view();
  add_what_if_plans(s, policy, view, plans, delayed);
  Result<TensorReport> report = analyze_recipes(engine_, view, plans, channel_options_.factor);
  if (!report.ok()) return report.status();
  SampleAnalysis a;
  add_what_ifs(s, view, report.value(), 1, delayed, a);
  a.block_ranges = block_dynamic_ranges(view, policy.block_ranges);
  // The run's own error, measured from its codes; its block scales as the observed analysis reads them.
  QuantStats stats = check_cast(view, job.value(), jc.spec, report.value().recipes[0].stats).stats;
  if (!jc.modeled) stats.code_mismatches = stats.codes_compared = 0;
  const QuantStats& seen = scales.value().stats;
  stats.scale_min = seen.scale_min;
  stats.scale_max = seen.scale_max;
  stats.scale_blocks = seen.scale_blocks;
  stats.scale_blocks_at_floor = seen.scale_blocks_at_floor;
  stats.scale_blocks_at_ceiling = seen.scale_blocks_at_ceiling;
  stats.max_block_dynamic_range_log2 = seen.max_block_dynamic_range_log2;
  std::copy(std::begin(seen.scale_histogram), std::end(seen.scale_histogram), std::begin(stats.scale_histogram));
  RecipeOutcome o = job_outcome(s, codes, stats);
  // The scale the cast multiplied by, exactly (1 / scale_inv need not give it back).
  if (s.header.scale_layout == ScaleLayout::kTensorScalar && jc.spec.rule == ScaleRule::kTensorFixed) {
    o.scale = o.scale_min = o.scale_max = jc.spec.fixed_scale;
  }
  o.source = s.header.cast->recomputed() ? DataSource::kRecomputed : DataSource::kCastInput;
  o.job_recipe = jc.recipe;
  a.recipes.insert(a.recipes.begin(), std::move(o));
  return a;
}

}  // namespace fp8scope::server
