// The analysis workers: each takes samples from its FIFO of the ingest queue, evaluates the
// policy's recipes with the statistics engine (delayed scaling from the tensor's own amax history,
// TE's update order), and publishes the result to the metrics, the tensor table and the history.
// FP8 samples have no high-precision original: what their codes show is published as recipe
// "observed" (saturation, scale in use vs current scaling). When both operands of a forward GEMM
// arrive for a step, the GEMM's FP8 output is compared with its high-precision output.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "byte_budget.h"
#include "fp8scope/delayed_scaling.h"
#include "fp8scope/gpu_gemm_check.h"
#include "gemm_pairing.h"
#include "fp8scope/stats_engine.h"
#include "health_metrics.h"
#include "history_store.h"
#include "ingest_queue.h"
#include "policy_store.h"
#include "tensor_series.h"
#include "tensor_table.h"

namespace fp8scope::server {

struct PipelineDeps {
  IngestQueue* queue;
  ByteBudget* budget;
  StatsEngine* engine;
  PolicyStore* policy;
  TensorSeries* series;
  HealthMetrics* health;
  HistoryStore* history;
  TensorTable* tensors;
  GpuGemmCheck* gemm;  // null: GEMM checks run as the CPU emulation
};

class AnalysisPipeline {
 public:
  explicit AnalysisPipeline(PipelineDeps deps);
  ~AnalysisPipeline();

  void start();
  // Closes the queue and waits for the workers to finish what is queued, up to `deadline`; samples
  // still queued after it are dropped and counted ("shutdown"). Returns the number dropped.
  std::uint64_t drain(std::chrono::steady_clock::time_point deadline);

  // Analyzes one sample on the calling thread (the workers' body; tests call it directly).
  void process(Sample& sample);

 private:
  void worker(int shard);
  void check_gemm(const GemmPair& pair);
  DelayedScalingState& delayed_state(const Sample& s, const Recipe& recipe, CastFormat format);

  PipelineDeps d_;
  GemmPairing gemm_pairs_;
  std::mutex gemm_mu_;  // one GEMM check at a time
  std::vector<std::thread> workers_;
  std::atomic<bool> abandon_{false};
  std::atomic<std::uint64_t> abandoned_{0};
  std::mutex delayed_mu_;
  // (job, run, rank, layer, gemm, operand, format): TE keeps one history per quantized tensor.
  std::map<std::tuple<std::string, std::string, std::uint32_t, std::string, int, int, int>,
           std::unique_ptr<DelayedScalingState>>
      delayed_;
};

}  // namespace fp8scope::server
