#include "fp8scope/export/sample_publisher.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <utility>

#include "fp8scope/kernels/scale_layout.h"
#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope::server {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const MetricDef& metric(const char* name) { return *find_metric(name); }

// The fields that place any history record of a client's: when, whose, which step.
template <class Record>
void set_place(Record& rec, double time, const ClientInfo& client, std::uint64_t step) {
  rec.time = time;
  rec.job = client.job;
  rec.run = client.run;
  rec.host = client.host;
  rec.rank = client.rank;
  rec.step = step;
}

}  // namespace

double current_scale_for(CastFormat format, float te_amax) {
  if (format == CastFormat::kE2M1) return nvfp4_global_encode_scale(te_amax);
  return current_scale(te_amax, format_max(format), false, 0.0f);
}

SamplePublisher::SamplePublisher(TensorSeries& series, TensorTable& tensors, history::HistoryStore& history,
                                 MetricExport exported, TeLogWriter* te_log)
    : series_(series),
      tensors_(tensors),
      history_(history),
      te_log_(te_log),
      export_(std::move(exported)),
      last_step_(metric("fp8scope_last_step")),
      scale_(metric("fp8scope_scale")),
      scale_current_(metric("fp8scope_scale_current")),
      log2_ratio_(metric("fp8scope_log2_magnitude_ratio")),
      gemm_mse_(metric("fp8scope_gemm_output_mse")),
      gemm_cosine_(metric("fp8scope_gemm_output_cosine_similarity")),
      gemm_max_rel_error_(metric("fp8scope_gemm_output_max_rel_error")),
      expert_worst_(metric("fp8scope_expert_worst")),
      expert_median_(metric("fp8scope_expert_median_ratio")),
      tokens_max_(metric("fp8scope_expert_tokens_max")),
      tokens_mean_(metric("fp8scope_expert_tokens_mean")),
      experts_without_tokens_(metric("fp8scope_experts_without_tokens")),
      padding_nonzero_(metric("fp8scope_padding_nonzero_ratio")),
      padding_nonfinite_(metric("fp8scope_padding_nonfinite_ratio")) {
  for (const Statistic& st : statistics()) {
    const MetricDef* m = find_metric(std::string("fp8scope_") + st.metric_name());
    if (m == nullptr) continue;  // counts of one sample (numel, nan, inf) are no metric
    (st.per_recipe() ? recipe_metrics_ : tensor_metrics_).push_back({&st, m});
  }
}

bool SamplePublisher::exported(const RecipeOutcome& o) const {
  if (o.caster.is_job()) return true;
  for (RecipeKind k : export_.recipes) {
    if (o.caster.is(k)) return true;
  }
  return false;
}

history::HistoryRecord SamplePublisher::record(const Sample& s, const SampleAnalysis& a, const RecipeOutcome& o, double time,
                                      double scale_current) const {
  history::HistoryRecord rec;
  set_place(rec, time, *s.client, s.header.step);
  rec.layer = s.header.layer;
  rec.gemm = s.header.gemm;
  rec.operand = s.header.operand;
  rec.dtype = s.header.dtype;
  rec.numel = static_cast<std::int64_t>(a.moments.numel);
  rec.caster = o.caster;
  rec.format = o.format;
  rec.scale = o.scale.value_or(o.scale_min);
  rec.scale_max = o.scale_max;
  rec.scale_current = scale_current;
  for (const Statistic& st : statistics()) {
    rec.statistics.push_back(!st.per_recipe() || st.applies_to(o.caster.is_job(), o.block_scaled(), o.referenced())
                                 ? st.value(a.moments, o.stats, a.channels)
                                 : std::nan(""));
  }
  const std::vector<std::uint32_t>& persistent = a.channels.persistent;
  rec.outlier_channels.assign(persistent.begin(),
                              persistent.begin() + static_cast<std::ptrdiff_t>(
                                                       std::min(persistent.size(), history::kRecordedOutlierChannels)));
  if (!o.caster.is_job() || o.referenced()) rec.histogram.assign(std::begin(o.stats.histogram), std::end(o.stats.histogram));
  rec.codes_digest = o.codes_digest;
  if (s.header.expert) {
    rec.expert = *s.header.expert;
    if (*s.header.expert < s.header.expert_tokens.size()) {
      rec.expert_tokens = static_cast<std::int64_t>(s.header.expert_tokens[*s.header.expert]);
    }
  }
  rec.source = o.source;
  rec.cast_recipe = o.job_recipe;
  rec.relative_values = a.relative_values;
  rec.block_ranges = a.block_ranges;
  rec.padding_nonzero = a.padding.nonzero;
  rec.padding_nonfinite = a.padding.nonfinite;
  if (o.caster.is_job()) {
    rec.scale_layout = o.scale_layout;
    rec.gemm_alpha = s.header.gemm_alpha;
    if (o.block_scaled()) {
      rec.scale_histogram.assign(std::begin(o.stats.scale_histogram), std::end(o.stats.scale_histogram));
    }
  }
  return rec;
}

void SamplePublisher::publish(const Sample& s, const SampleAnalysis& a, const SamplingPolicy& policy) {
  const std::string gemm = gemm_name(s.header.gemm);
  const std::string op = operand_name(s.header.operand);
  const prometheus::Labels tensor_labels{{"job", s.client->job}, {"layer", s.header.layer}, {"gemm", gemm}, {"operand", op}};
  const std::uint32_t rank = s.client->rank;
  // A series holds the worst of its ranks and experts: this sample is one of them.
  const SeriesMember member{rank, s.header.expert ? static_cast<std::int64_t>(*s.header.expert) : -1};
  const double time = now_seconds();
  for (const StatisticMetric& m : tensor_metrics_) {
    if (m.statistic->per_channel() && a.channels.channels == 0) continue;  // a gradient's, or the job's codes
    if (a.relative_values && m.statistic->in_tensor_units()) continue;   // no series in unknown units
    series_.set(*m.metric, tensor_labels, member, m.statistic->value(a.moments, QuantStats{}, a.channels));
  }
  series_.set(last_step_, tensor_labels, member, static_cast<double>(s.header.step));

  TensorSummary summary{s.client->job, s.client->run, rank, s.header.layer, s.header.gemm, s.header.operand,
                        s.header.step, s.header.dtype, s.header.shape, time, {}, s.header.expert, {}};
  if (s.header.expert && *s.header.expert < s.header.expert_tokens.size()) {
    summary.expert_tokens = s.header.expert_tokens[*s.header.expert];
  }

  std::map<CastFormat, double> current_by_format;  // of the exported recipes' formats
  std::vector<history::HistoryRecord> records;     // written with the sample's ticket, at once
  for (const RecipeOutcome& o : a.recipes) {
    const double current = current_scale_for(o.format, a.te_amax);
    const bool as_metrics = exported(o);
    if (as_metrics) current_by_format[o.format] = current;
    prometheus::Labels labels = tensor_labels;
    labels["format"] = format_name(o.format);
    labels["recipe"] = o.caster.name();
    RecipeSummary& rs = summary.recipes.emplace_back();
    rs.caster = o.caster;
    rs.format = o.format;
    rs.scale = o.scale.value_or(o.scale_min);
    rs.scale_max = o.scale_max;
    rs.scale_current = current;
    rs.source = o.source;
    if (o.caster.is_job()) rs.scale_layout = o.scale_layout;
    for (const Statistic& st : statistics()) {
      if (!st.per_recipe() || st.applies_to(o.caster.is_job(), o.block_scaled(), o.referenced())) {
        rs.statistics.emplace_back(&st, st.value(a.moments, o.stats, a.channels));
      }
    }
    records.push_back(record(s, a, o, time, current));
    if (!as_metrics) continue;
    for (const StatisticMetric& m : recipe_metrics_) {
      if (a.relative_values && m.statistic->in_tensor_units()) continue;
      if (m.statistic->applies_to(o.caster.is_job(), o.block_scaled(), o.referenced())) {
        series_.set(*m.metric, labels, member, m.statistic->value(a.moments, o.stats, a.channels));
      }
    }
    if (export_.log2_histogram && o.caster.is(RecipeKind::kTensorCurrent)) {
      // Current scaling maps amax to the format's max, so no bin above floor(log2 max) has mass:
      // those series are left out.
      const int top_bin = std::min(kHistogramBins - 1, std::ilogb(format_max(o.format)) - kHistogramMinLog2);
      std::uint64_t binned = 0;
      for (std::uint64_t c : o.stats.histogram) binned += c;
      for (int b = 0; b <= top_bin; ++b) {
        prometheus::Labels bin = labels;
        bin["log2"] = std::to_string(kHistogramMinLog2 + b);
        series_.set(log2_ratio_, bin, member,
                    binned ? static_cast<double>(o.stats.histogram[b]) / static_cast<double>(binned) : 0.0);
      }
    }
    if (o.scale) series_.set(scale_, labels, member, *o.scale);
  }
  for (const auto& [format, current] : current_by_format) {
    prometheus::Labels labels = tensor_labels;
    labels["format"] = format_name(format);
    series_.set(scale_current_, labels, member, current);
  }
  if (te_log_ != nullptr) te_log_->add(records, policy);
  history_.add_sample(std::move(records), s.journal);  // its ticket released once they are committed
  if (s.header.expert || !s.header.expert_tokens.empty()) publish_experts(s, a, tensor_labels);
  tensors_.update(std::move(summary));
}

void SamplePublisher::publish_spread(const MetricDef& metric, const prometheus::Labels& labels,
                                     const std::string& statistic) {
  const std::optional<ExpertSpread> spread = series_.expert_spread(metric, labels);
  if (!spread) return;
  prometheus::Labels l = labels;
  l.try_emplace("format", "");
  l.try_emplace("recipe", "");
  l["statistic"] = statistic;
  series_.set(expert_worst_, l, SeriesMember{}, static_cast<double>(spread->worst_expert));
  series_.set(expert_median_, l, SeriesMember{}, spread->median);
}

void SamplePublisher::publish_experts(const Sample& s, const SampleAnalysis& a, const prometheus::Labels& tensor_labels) {
  const SeriesMember member{s.client->rank, s.header.expert ? static_cast<std::int64_t>(*s.header.expert) : -1};
  if (s.header.expert) {
    publish_spread(metric("fp8scope_nonfinite_ratio"), tensor_labels, "nonfinite_ratio");
    for (const RecipeOutcome& o : a.recipes) {
      if (!exported(o)) continue;
      prometheus::Labels labels = tensor_labels;
      labels["format"] = format_name(o.format);
      labels["recipe"] = o.caster.name();
      for (const char* statistic : {"overflow_ratio", "underflow_ratio"}) {
        const MetricDef* m = find_metric(std::string("fp8scope_") + statistic);
        const Statistic* st = m != nullptr ? m->statistic : nullptr;
        if (st != nullptr && st->applies_to(o.caster.is_job(), o.block_scaled(), o.referenced())) publish_spread(*m, labels, statistic);
      }
    }
  }
  if (!s.header.expert_tokens.empty()) {
    const prometheus::Labels layer{{"job", s.client->job}, {"layer", s.header.layer}};
    std::uint64_t most = 0, total = 0, idle = 0;
    for (std::uint64_t t : s.header.expert_tokens) most = std::max(most, t), total += t, idle += t == 0;
    const SeriesMember rank_only{s.client->rank, -1};
    series_.set(tokens_max_, layer, rank_only, static_cast<double>(most));
    series_.set(tokens_mean_, layer, rank_only, static_cast<double>(total) / static_cast<double>(s.header.expert_tokens.size()));
    series_.set(experts_without_tokens_, layer, rank_only, static_cast<double>(idle));
  }
  if (a.padding.values > 0) {
    const double n = static_cast<double>(a.padding.values);
    series_.set(padding_nonzero_, tensor_labels, member, static_cast<double>(a.padding.nonzero) / n);
    series_.set(padding_nonfinite_, tensor_labels, member, static_cast<double>(a.padding.nonfinite) / n);
  }
}

void SamplePublisher::publish_gemm_check(const GemmPair& p, const std::vector<GemmCheckResult>& results) {
  const double time = now_seconds();
  for (const GemmCheckResult& r : results) {
    const prometheus::Labels labels{{"job", p.client->job}, {"layer", p.layer}, {"accumulate", r.accumulate}};
    series_.set(gemm_mse_, labels, SeriesMember{p.client->rank}, r.mse);
    series_.set(gemm_cosine_, labels, SeriesMember{p.client->rank}, r.cosine);
    series_.set(gemm_max_rel_error_, labels, SeriesMember{p.client->rank}, r.max_rel_error);
    history::GemmOutputRecord rec;
    set_place(rec, time, *p.client, p.step);
    rec.layer = p.layer;
    rec.accumulate = r.accumulate;
    rec.numel = static_cast<std::int64_t>(r.rows * r.n);
    rec.scale_x = r.scale_x;
    rec.scale_w = r.scale_w;
    rec.mse = r.mse;
    rec.cosine = r.cosine;
    rec.max_rel_error = r.max_rel_error;
    history_.add(std::move(rec));
  }
}

void SamplePublisher::publish_scalar(const ScalarMark& m) {
  history::ScalarRecord rec;
  set_place(rec, m.time, *m.client, m.step);
  rec.name = m.name;
  rec.value = m.value;
  history_.add(std::move(rec));
}

}  // namespace fp8scope::server
