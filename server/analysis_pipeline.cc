#include "analysis_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "fp8scope/code_digest.h"
#include "fp8scope/gemm_check.h"
#include "fp8scope/recipe_analysis.h"
#include "fp8scope/scale_rules.h"
#include "fp8scope/statistics_table.h"
#include "fp8scope/wire.h"
#include "metrics_table.h"

namespace fp8scope::server {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What one analyzed sample produced for one recipe, before it is published.
struct Outcome {
  std::string recipe;  // recipe name, or "observed"
  CastFormat format = CastFormat::kE4M3;
  std::optional<double> scale;  // the one scale of a per-tensor recipe (or in use, observed)
  double scale_min = 0, scale_max = 0;
  QuantStats stats;
  bool what_if = true;  // false for observed FP8 data: only saturation and scale mean something
};

std::string hex_digest(std::uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

std::vector<RecipeKind> policy_recipes(const v1::Policy& p) {
  std::vector<RecipeKind> kinds;
  for (int r : p.recipes()) {
    if (auto k = wire::from_wire(static_cast<v1::Recipe>(r))) kinds.push_back(*k);
  }
  if (kinds.empty()) kinds.assign(std::begin(kAllRecipeKinds), std::end(kAllRecipeKinds));
  return kinds;
}

}  // namespace

AnalysisPipeline::AnalysisPipeline(PipelineDeps deps) : d_(deps) {}

AnalysisPipeline::~AnalysisPipeline() {
  d_.queue->close();
  for (auto& w : workers_) w.join();
}

void AnalysisPipeline::start() {
  for (int shard = 0; shard < d_.queue->shards(); ++shard) workers_.emplace_back([this, shard] { worker(shard); });
}

std::uint64_t AnalysisPipeline::drain(std::chrono::steady_clock::time_point deadline) {
  d_.queue->close();
  std::thread watchdog([this, deadline] {
    while (std::chrono::steady_clock::now() < deadline && d_.queue->size() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    abandon_ = true;  // whatever is still queued is dropped, not analyzed
  });
  for (auto& w : workers_) w.join();
  workers_.clear();
  watchdog.join();
  return abandoned_.load();
}

void AnalysisPipeline::worker(int shard) {
  while (std::optional<Sample> s = d_.queue->pop(shard)) {
    if (abandon_) {
      ++abandoned_;
      d_.health->sample_dropped("shutdown");
    } else {
      process(*s);
    }
    s->lease.reset();
    d_.health->set_queue_bytes(d_.budget->used());
  }
}

DelayedScalingState& AnalysisPipeline::delayed_state(const Sample& s, const Recipe& recipe, CastFormat format) {
  std::lock_guard<std::mutex> lock(delayed_mu_);
  auto& slot = delayed_[{s.client->job, s.client->run, s.client->rank, s.header.layer(), s.header.gemm(),
                         s.header.operand(), static_cast<int>(format)}];
  if (!slot) slot = std::make_unique<DelayedScalingState>(recipe, format);
  return *slot;
}

void AnalysisPipeline::process(Sample& s) {
  const v1::Policy policy = d_.policy->get();
  const Operand operand = wire::from_wire(s.header.operand()).value_or(Operand::kX);
  const bool fp8_input = s.dtype == DType::kE4M3 || s.dtype == DType::kE5M2;
  const float scale_inv = s.header.scale_inv() > 0.0f ? s.header.scale_inv() : 1.0f;
  TensorView view{s.payload.data(), s.dtype, s.rows, s.cols, scale_inv};

  std::vector<RecipePlan> plans;
  std::vector<DelayedScalingState*> delayed;
  if (!fp8_input) {
    for (RecipeKind kind : policy_recipes(policy)) {
      RecipePlan p;
      p.recipe = default_recipe(kind);
      p.format = p.recipe.format_for(operand);
      p.operand = operand;
      DelayedScalingState* state = nullptr;
      if (kind == RecipeKind::kTensorDelayed) {
        state = &delayed_state(s, p.recipe, p.format);
        p.scale = state->scale();
      }
      plans.push_back(p);
      delayed.push_back(state);
    }
  }
  Result<TensorReport> analyzed = analyze_recipes(*d_.engine, view, plans);
  if (!analyzed.ok()) {
    d_.health->sample_dropped("analysis_error");
    return;
  }
  const TensorReport& report = analyzed.value();

  std::vector<Outcome> outcomes;
  for (std::size_t k = 0; k < report.recipes.size(); ++k) {
    const RecipeResult& r = report.recipes[k];
    if (delayed[k] != nullptr) delayed[k]->update(report.te_amax);  // this step's amax joins the history
    Outcome o;
    o.recipe = recipe_name(r.plan.recipe.kind);
    o.format = r.plan.format;
    if (auto ts = r.tensor_scale()) o.scale = *ts;
    o.scale_min = r.stats.scale_min;
    o.scale_max = r.stats.scale_max;
    o.stats = r.stats;
    outcomes.push_back(o);
  }
  if (fp8_input) {
    Outcome o;
    o.recipe = "observed";
    o.format = s.dtype == DType::kE4M3 ? CastFormat::kE4M3 : CastFormat::kE5M2;
    o.what_if = false;
    const auto max = static_cast<std::uint8_t>(max_code(format_row(o.format)));
    for (std::uint8_t c : s.payload) o.stats.saturated += (c & 0x7F) == max;
    o.scale = o.scale_min = o.scale_max = 1.0 / scale_inv;
    outcomes.push_back(o);
  }

  // Publish: metrics, tensor table, history.
  const std::string gemm = wire::gemm_name(s.header.gemm());
  const std::string op = operand_name(operand);
  const prometheus::Labels tensor_labels{{"job", s.client->job}, {"layer", s.header.layer()}, {"gemm", gemm}, {"operand", op}};
  const std::uint32_t rank = s.client->rank;
  const double time = now_seconds();
  auto set = [&](const char* name, const prometheus::Labels& labels, double v) {
    d_.series->set(*find_metric(name), labels, rank, v);
  };
  for (const MetricDef& m : metric_definitions()) {
    if (m.statistic != nullptr && !m.statistic->per_recipe) set(m.name.c_str(), tensor_labels, m.statistic->compute(report.moments, QuantStats{}));
  }
  set("fp8scope_last_step", tensor_labels, static_cast<double>(s.header.step()));

  v1::TensorSummary summary;
  v1::TensorKey* key = summary.mutable_key();
  key->set_job(s.client->job);
  key->set_run(s.client->run);
  key->set_rank(rank);
  key->set_layer(s.header.layer());
  key->set_gemm(s.header.gemm());
  key->set_operand(s.header.operand());
  summary.set_step(s.header.step());
  summary.set_dtype(wire::to_wire(s.dtype));
  *summary.mutable_shape() = s.header.shape();
  summary.set_time(time);

  std::map<CastFormat, double> current_scale_by_format;
  for (const Outcome& o : outcomes) {
    const double current = current_scale(report.te_amax, format_max(o.format), false, 0.0f);
    current_scale_by_format[o.format] = current;
    prometheus::Labels labels = tensor_labels;
    labels["format"] = format_name(o.format);
    labels["recipe"] = o.recipe;
    v1::RecipeStats* rs = summary.add_recipes();
    rs->set_recipe(o.recipe);
    rs->set_format(format_name(o.format));
    rs->set_scale(o.scale.value_or(o.scale_min));
    rs->set_scale_max(o.scale_max);
    rs->set_scale_current(current);
    HistoryRecord rec;
    rec.time = time;
    rec.job = s.client->job;
    rec.run = s.client->run;
    rec.rank = rank;
    rec.step = s.header.step();
    rec.layer = s.header.layer();
    rec.gemm = gemm;
    rec.operand = op;
    rec.dtype = dtype_name(s.dtype);
    rec.numel = report.moments.numel;
    rec.recipe = o.recipe;
    rec.format = format_name(o.format);
    rec.scale = o.scale.value_or(o.scale_min);
    rec.scale_max = o.scale_max;
    rec.scale_current = current;
    for (const Statistic& st : statistics()) {
      double v = st.compute(report.moments, o.stats);
      const bool meaningful = !st.per_recipe || o.what_if || std::string(st.key) == "saturation_ratio";
      if (!meaningful) v = std::nan("");
      rec.statistics.push_back(v);
      if (meaningful) (*rs->mutable_statistics())[st.key] = v;
      if (st.per_recipe && meaningful) set((std::string("fp8scope_") + st.metric_name()).c_str(), labels, v);
    }
    if (o.what_if) rec.histogram.assign(std::begin(o.stats.histogram), std::end(o.stats.histogram));
    // Fingerprints of FP8 codes for the inference check: the job's own codes, and the codes a
    // weight's per-tensor current cast would write (the scale a PTQ export or TE would choose).
    if (!o.what_if) {
      rec.codes_digest = hex_digest(code_digest(s.payload));
    } else if (operand == Operand::kW && o.recipe == "tensor_current" && o.scale) {
      rec.codes_digest = hex_digest(quantized_code_digest(view, o.format, static_cast<float>(*o.scale)));
    }
    if (o.what_if && o.recipe == "tensor_current") {
      // Current scaling maps amax to the format's max, so no bin above floor(log2 max) has mass:
      // those series are left out.
      const int top_bin = std::min(kHistogramBins - 1, std::ilogb(format_max(o.format)) - kHistogramMinLog2);
      std::uint64_t binned = 0;
      for (std::uint64_t c : o.stats.histogram) binned += c;
      for (int b = 0; b <= top_bin; ++b) {
        prometheus::Labels bin = labels;
        bin["log2"] = std::to_string(kHistogramMinLog2 + b);
        set("fp8scope_log2_magnitude_ratio", bin,
            binned ? static_cast<double>(o.stats.histogram[b]) / static_cast<double>(binned) : 0.0);
      }
    }
    if (o.scale) set("fp8scope_scale", labels, *o.scale);
    d_.history->add(std::move(rec));
  }
  for (const auto& [format, current] : current_scale_by_format) {
    prometheus::Labels labels = tensor_labels;
    labels["format"] = format_name(format);
    set("fp8scope_scale_current", labels, current);
  }
  d_.tensors->update(summary);
  if (!fp8_input) {
    if (std::optional<GemmPair> pair = gemm_pairs_.offer(s)) check_gemm(*pair);
  }
  d_.health->sample_analyzed(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - s.completed).count());
}

void AnalysisPipeline::check_gemm(const GemmPair& p) {
  const TensorView x{p.x.data(), p.x_dtype, p.x_rows, p.x_cols, p.x_scale_inv};
  const TensorView w{p.w.data(), p.w_dtype, p.w_rows, p.w_cols, p.w_scale_inv};
  std::vector<GemmCheckResult> results;
  std::lock_guard<std::mutex> lock(gemm_mu_);
  if (d_.gemm != nullptr) {
    auto gpu = d_.gemm->run(x, w);
    if (gpu.ok()) {
      results = gpu.value();
    } else {
      spdlog::debug("GEMM check of {} on the GPU: {}; emulating on the CPU", p.layer, gpu.message());
    }
  }
  if (results.empty()) {
    auto cpu = gemm_check_cpu(x, w, CastFormat::kE4M3);
    if (!cpu.ok()) {
      spdlog::debug("GEMM check of {} skipped: {}", p.layer, cpu.message());
      return;
    }
    results.push_back(cpu.value());
  }
  const double time = now_seconds();
  for (const GemmCheckResult& r : results) {
    const prometheus::Labels labels{{"job", p.client->job}, {"layer", p.layer}, {"accumulate", r.accumulate}};
    d_.series->set(*find_metric("fp8scope_gemm_output_mse"), labels, p.client->rank, r.mse);
    d_.series->set(*find_metric("fp8scope_gemm_output_cosine_similarity"), labels, p.client->rank, r.cosine);
    d_.series->set(*find_metric("fp8scope_gemm_output_max_rel_error"), labels, p.client->rank, r.max_rel_error);
    HistoryRecord rec;
    rec.time = time;
    rec.job = p.client->job;
    rec.run = p.client->run;
    rec.rank = p.client->rank;
    rec.step = p.step;
    rec.layer = p.layer;
    rec.gemm = "fprop";
    rec.operand = "y";
    rec.dtype = "f32";
    rec.numel = r.rows * r.n;
    rec.recipe = "gemm_" + r.accumulate;
    rec.format = "e4m3";
    rec.scale = r.scale_x;
    rec.scale_max = r.scale_w;
    for (const Statistic& st : statistics()) {
      const std::string key = st.key;
      rec.statistics.push_back(key == "mse" ? r.mse : key == "cosine" ? r.cosine : std::nan(""));
    }
    d_.history->add(std::move(rec));
  }
}

}  // namespace fp8scope::server
