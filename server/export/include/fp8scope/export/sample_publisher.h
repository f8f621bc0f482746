// Where an analyzed sample goes: its Prometheus series (the statistics of the tensor and of each
// recipe, scales, the log2-magnitude histogram under current scaling), the live tensor table
// behind `fp8scope tensors`, and one history record per recipe; a GEMM check's figures and its
// record; a job's scalars and step marks. Metric definitions are looked up once, not per value.
#pragma once

#include <vector>

#include "fp8scope/kernels/gemm_check.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/analysis/gemm_pairing.h"
#include "fp8scope/export/metrics_table.h"
#include "fp8scope/ingest/sample.h"
#include "fp8scope/analysis/sample_analysis.h"
#include "fp8scope/export/tensor_series.h"
#include "fp8scope/export/tensor_table.h"
#include "fp8scope/export/te_log_writer.h"

namespace fp8scope::server {

// Which figures become series: what one tensor costs in Prometheus (docs/operations.md
// "Cardinality"). History and the tensor table get every recipe regardless.
struct MetricExport {
  std::vector<RecipeKind> recipes;  // emulated recipes exported; the job's own codes always are
  bool log2_histogram = false;      // the log2-magnitude bins under current scaling
};

class SamplePublisher {
 public:
  // te_log: where each sample's records also go as TE debug log lines (null: nowhere).
  SamplePublisher(TensorSeries& series, TensorTable& tensors, history::HistoryStore& history, MetricExport exported,
                  TeLogWriter* te_log = nullptr);

  // `policy`: the job's, whose TE config (te_logged) says what its TE log lines are.
  void publish(const Sample& s, const SampleAnalysis& a, const SamplingPolicy& policy = {});
  void publish_gemm_check(const GemmPair& pair, const std::vector<GemmCheckResult>& results);
  void publish_scalar(const ScalarMark& scalar);

 private:
  struct StatisticMetric {
    const Statistic* statistic;
    const MetricDef* metric;
  };
  bool exported(const RecipeOutcome& o) const;
  history::HistoryRecord record(const Sample& s, const SampleAnalysis& a, const RecipeOutcome& o, double time,
                       double scale_current) const;
  // An expert's sample: where its layer's experts stand on the statistics alerts watch, the
  // tokens of the call, and the padding past its own tokens.
  void publish_experts(const Sample& s, const SampleAnalysis& a, const prometheus::Labels& tensor_labels);
  void publish_spread(const MetricDef& metric, const prometheus::Labels& labels, const std::string& statistic);

  TensorSeries& series_;
  TensorTable& tensors_;
  history::HistoryStore& history_;
  TeLogWriter* const te_log_;
  MetricExport export_;
  std::vector<StatisticMetric> tensor_metrics_, recipe_metrics_;
  const MetricDef& last_step_;
  const MetricDef& scale_;
  const MetricDef& scale_current_;
  const MetricDef& log2_ratio_;
  const MetricDef& gemm_mse_;
  const MetricDef& gemm_cosine_;
  const MetricDef& gemm_max_rel_error_;
  const MetricDef& expert_worst_;
  const MetricDef& expert_median_;
  const MetricDef& tokens_max_;
  const MetricDef& tokens_mean_;
  const MetricDef& experts_without_tokens_;
  const MetricDef& padding_nonzero_;
  const MetricDef& padding_nonfinite_;
};

// The scale "current scaling" would choose for this amax in a format: fmax / amax for FP8; for
// E2M1, NVFP4's per-tensor encode scale (the one level of NVFP4 that is per tensor).
double current_scale_for(CastFormat format, float te_amax);

}  // namespace fp8scope::server
