#include "fp8scope/export/metrics_table.h"

#include <nlohmann/json.hpp>

namespace fp8scope::server {
namespace {

// Rows of the table, as gauges and counters.
struct Rows {
  std::vector<MetricDef>& t;
  void gauge(std::string name, std::string help, std::string unit, std::vector<std::string> labels) {
    t.push_back({std::move(name), MetricKind::kGauge, std::move(help), std::move(unit), std::move(labels)});
  }
  void counter(std::string name, std::string help, std::string unit, std::vector<std::string> labels) {
    t.push_back({std::move(name), MetricKind::kCounter, std::move(help), std::move(unit), std::move(labels)});
  }
};

// What the daemon says about the tensors: their statistics, scales, experts and GEMM outputs.
void add_tensor_metrics(std::vector<MetricDef>& t) {
  for (const Statistic& s : statistics()) {
    const std::string key = s.key;
    if (key == "numel" || key == "nan" || key == "inf") continue;  // counts of one sample, not a level
    t.push_back({std::string("fp8scope_") + s.metric_name(), MetricKind::kGauge, s.help, s.unit,
                 s.per_recipe() ? kRecipeLabels : kTensorLabels, &s, s.lower_is_worse});
  }
  Rows rows{t};
  rows.gauge("fp8scope_scale",
             "Scale the recipe applied (delayed scaling: from its amax history; observed: the job's per-tensor "
             "scale, 1/scale_inv).",
             "1", kRecipeLabels);
  rows.gauge("fp8scope_scale_current",
             "Scale current scaling would choose for the latest sample (fmax / amax; e2m1: NVFP4's per-tensor scale, "
             "2688 / amax).",
             "1", {"job", "layer", "gemm", "operand", "format"});
  rows.gauge("fp8scope_last_step", "Training step of the latest analyzed sample.", "steps", kTensorLabels);
  // Mixture-of-experts layers: every tensor series holds the worst of a layer's experts (an expert
  // label would multiply the series by the expert count); these name that expert, set it against
  // the others, and say how the tokens spread. Tensor statistics have format and recipe "".
  std::vector<std::string> expert_labels = kRecipeLabels;
  expert_labels.push_back("statistic");
  rows.gauge("fp8scope_expert_worst",
             "The expert whose latest value of the statistic (nonfinite_ratio, overflow_ratio, underflow_ratio) is the "
             "worst of its layer's experts.",
             "expert", expert_labels);
  rows.gauge("fp8scope_expert_median_ratio",
             "The median of the statistic over the layer's experts (the latest sample of each).", "ratio",
             expert_labels);
  rows.gauge("fp8scope_expert_tokens_max", "Tokens routed to the busiest expert of the layer's latest call.", "tokens",
             {"job", "layer"});
  rows.gauge("fp8scope_expert_tokens_mean", "Tokens routed per expert of the layer's latest call, on average.",
             "tokens", {"job", "layer"});
  rows.gauge("fp8scope_experts_without_tokens", "Experts of the layer's latest call that were routed no token.",
             "experts", {"job", "layer"});
  rows.gauge("fp8scope_padding_nonzero_ratio",
             "Share of the padding past an expert's tokens that is not zero (it must be: it reaches valid rows).",
             "ratio", kTensorLabels);
  rows.gauge("fp8scope_padding_nonfinite_ratio", "Share of the padding past an expert's tokens that is NaN or Inf.",
             "ratio", kTensorLabels);
  // The log2-magnitude histogram of the scaled tensor under current scaling, for heatmaps against
  // the FP8 window: share of nonzero finite elements with floor(log2|x*s|) == log2 (the first bin
  // also holds everything below, the last everything above).
  std::vector<std::string> histogram_labels = kRecipeLabels;
  histogram_labels.push_back("log2");
  rows.gauge("fp8scope_log2_magnitude_ratio", "Share of nonzero elements whose scaled magnitude has this floor(log2).",
             "ratio", histogram_labels);
  // The forward GEMM's output in FP8 (E4M3, current per-tensor scales) against high precision.
  const std::vector<std::string> gemm_labels = {"job", "layer", "accumulate"};
  rows.gauge("fp8scope_gemm_output_mse", "MSE of the FP8 GEMM's output against the BF16/fp32 GEMM's.", "value",
             gemm_labels);
  rows.gauge("fp8scope_gemm_output_cosine_similarity",
             "Cosine similarity of the FP8 and the high-precision GEMM outputs.", "1", gemm_labels);
  rows.gauge("fp8scope_gemm_output_max_rel_error", "max |Y_fp8 - Y| / max |Y| of the forward GEMM's output.", "1",
             gemm_labels);
}

// What the daemon says about itself: throughput, drops, queue, series and history.
void add_daemon_metrics(std::vector<MetricDef>& t) {
  Rows rows{t};
  // The job's own casts (Transformer Engine's, captured by the hook): what they were analyzed from,
  // and the live check of fp8scope's model of the job's recipe against the job's codes.
  rows.counter("fp8scope_cast_samples_total",
               "Samples that came with the cast that wrote their codes, by what they were analyzed from: the cast's "
               "input (cast), its recompute from a fused kernel's inputs (recompute), or the codes alone when the "
               "cast wrote nothing (noop).",
               "samples", {"job", "source"});
  rows.counter("fp8scope_cast_code_mismatches_total",
               "Codes (with their block scales) of the job's own casts that fp8scope's model of the recipe, casting "
               "the same input with the same scale and amax, writes differently. 0 when the model is right.",
               "elements", {"job", "recipe"});
  rows.counter("fp8scope_cast_codes_compared_total", "Codes of the job's own casts the code check compared.",
               "elements", {"job", "recipe"});
  rows.counter("fp8scope_samples_total", "Samples received complete and queued for analysis.", "samples", {});
  rows.counter("fp8scope_samples_analyzed_total", "Samples analyzed.", "samples", {});
  rows.counter("fp8scope_samples_dropped_total",
               "Samples not analyzed, by reason (daemon side: queue_full, bad_shape, bad_step, ...; bad_scalar for a "
               "step mark or scalar; client side: client_ and one of the hook's reasons, client_other for any other).",
               "samples", {"reason"});
  rows.counter("fp8scope_received_bytes_total", "Payload bytes received.", "bytes", {});
  rows.counter("fp8scope_shared_memory_bytes_total",
               "Of the payload bytes received, those copied out of clients' shared memory on this host instead of "
               "streamed.",
               "bytes", {});
  rows.gauge("fp8scope_queue_bytes", "Payload bytes waiting for analysis.", "bytes", {});
  rows.gauge("fp8scope_queue_budget_bytes", "Memory budget for payloads waiting for analysis.", "bytes", {});
  t.push_back({"fp8scope_analysis_seconds",
               MetricKind::kHistogram,
               "Seconds from a sample's last chunk to the end of its analysis.",
               "seconds",
               {}});
  rows.gauge("fp8scope_clients", "Connected ingest streams (training processes).", "clients", {});
  rows.gauge("fp8scope_series", "Tensor metric series exported.", "series", {});
  rows.counter("fp8scope_series_suppressed_total", "Tensor series not created because --max-series was reached.",
               "series", {});
  rows.counter("fp8scope_records_stored_total", "Statistic records written to the history (SQLite or PostgreSQL).",
               "records", {});
  rows.counter("fp8scope_history_write_failures_total",
               "History writes that failed (a full disk, a locked file); their records are kept and retried.", "writes",
               {});
  rows.gauge("fp8scope_history_write_failing", "1 while history writes fail (the last attempt failed), else 0.", "1",
             {});
  rows.gauge("fp8scope_history_pending_records", "Records waiting to be written to the history.", "records", {});
  rows.counter(
      "fp8scope_history_records_lost_total",
      "Records dropped unwritten: more than 200,000 waited while writes failed, or writes still failed at shutdown.",
      "records", {});
  rows.counter("fp8scope_te_log_lines_total",
               "Lines written to --te-log-dir (TE debug-API statistics logs); 0 without it.", "lines", {});
  rows.counter("fp8scope_te_log_lines_dropped_total",
               "Lines not written to --te-log-dir, by reason: queue_full (the disk fell behind), size_limit "
               "(--te-log-max-bytes), too_many_files (4,096 job and rank files), write_failed (a full disk, a "
               "link, tried again after a second).",
               "lines", {"reason"});
  rows.gauge("fp8scope_te_log_bytes", "Bytes the --te-log-dir files hold, against --te-log-max-bytes.", "bytes", {});
  rows.counter(
      "fp8scope_acknowledged_samples_lost_total",
      "Samples acknowledged as accepted whose records were never stored: found at start, left by a daemon that "
      "stopped first (killed, or its drain or last write failed), or dropped unwritten from the history backlog.",
      "samples", {});
  rows.gauge("fp8scope_unstored_accepted_samples",
             "Samples acknowledged as accepted whose records are not stored yet (at most 65,536: more are dropped as "
             "journal_full).",
             "samples", {});
  rows.gauge("fp8scope_up", "1 while fp8scoped is serving; on /health (for probes), not on /metrics.", "1", {});
  rows.gauge("fp8scope_build_info", "Always 1; labels say the version and the statistics backend.", "1",
             {"version", "backend"});
}

std::vector<MetricDef> build() {
  std::vector<MetricDef> t;
  add_tensor_metrics(t);
  add_daemon_metrics(t);
  return t;
}

}  // namespace

const std::vector<MetricDef>& metric_definitions() {
  static const std::vector<MetricDef> table = build();
  return table;
}

const MetricDef* find_metric(std::string_view name) {
  for (const MetricDef& d : metric_definitions()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const char* kind_name(MetricKind kind) {
  switch (kind) {
    case MetricKind::kGauge:
      return "gauge";
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kHistogram:
      return "histogram";
  }
  return "?";
}

std::string metrics_table_json() {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const MetricDef& d : metric_definitions()) {
    nlohmann::ordered_json row = {
        {"name", d.name}, {"type", kind_name(d.kind)}, {"help", d.help}, {"unit", d.unit}, {"labels", d.labels}};
    if (d.statistic) row["worst_rank"] = d.lower_is_worse ? "min" : "max";
    rows.push_back(std::move(row));
  }
  return rows.dump(2);
}

}  // namespace fp8scope::server
