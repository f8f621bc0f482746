// The analysis workers: each takes samples from its FIFO of the ingest queue, analyzes them
// (sample_analysis.h: the policy's what-if recipes, or what a job's own codes show) and publishes
// the result (sample_publisher.h: metrics, the tensor table, the history). When both operands of a
// forward GEMM arrive for a step, the GEMM's FP8 output is compared with its high-precision output
// (gemm_checker.h) and published too.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fp8scope/ingest/byte_budget.h"
#include "fp8scope/kernels/gpu_gemm_check.h"
#include "fp8scope/kernels/stats_engine.h"
#include "fp8scope/analysis/gemm_checker.h"
#include "fp8scope/analysis/gemm_pairing.h"
#include "fp8scope/export/health_metrics.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/ingest/ingest_queue.h"
#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/analysis/sample_analysis.h"
#include "fp8scope/export/sample_publisher.h"
#include "fp8scope/export/tensor_series.h"
#include "fp8scope/export/tensor_table.h"

namespace fp8scope::server {

struct PipelineDeps {
  IngestQueue* queue;
  ByteBudget* budget;
  StatsEngine* engine;
  PolicyStore* policy;
  TensorSeries* series;
  HealthMetrics* health;
  history::HistoryStore* history;
  AckJournal* journal;
  TensorTable* tensors;
  GpuGemmCheck* gemm;  // null: GEMM checks run as the CPU emulation
  std::size_t max_tensors;  // per-tensor state kept (delayed-scaling histories), most recent first
  OutlierChannelOptions outlier_channels;
  MetricExport exported;    // which figures become series
  TeLogWriter* te_log = nullptr;  // --te-log-dir, or null
};

class AnalysisPipeline {
 public:
  explicit AnalysisPipeline(PipelineDeps deps);
  ~AnalysisPipeline();

  void start();
  // Closes the queue and waits for the workers to finish what is queued, up to `deadline`; samples
  // still queued after it are dropped and counted ("shutdown"). Returns the number dropped.
  std::uint64_t drain(std::chrono::steady_clock::time_point deadline);

  // Analyzes and publishes one sample on the calling thread (the workers' body).
  void process(Sample& sample);

 private:
  void worker(int shard);
  void drop(const Sample& s, const std::string& why);

  PipelineDeps d_;
  SampleAnalyzer analyzer_;
  SamplePublisher publisher_;
  GemmPairing gemm_pairs_;
  GemmChecker gemm_checker_;
  std::vector<std::thread> workers_;
  std::atomic<bool> abandon_{false};
  std::atomic<std::uint64_t> abandoned_{0};
};

}  // namespace fp8scope::server
