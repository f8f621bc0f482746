#include "analysis_pipeline.h"

#include <cmath>

#include <spdlog/spdlog.h>

#include "fp8scope/gemm_check.h"
#include "fp8scope/statistics_table.h"
#include "metrics_table.h"

namespace fp8scope::server {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

AnalysisPipeline::AnalysisPipeline(PipelineDeps deps)
    : d_(deps),
      analyzer_(*deps.engine, deps.max_tensors),
      publisher_(*deps.series, *deps.tensors, *deps.history, deps.exported),
      // Waiting GEMM operands keep their leases: at most a quarter of the queue budget.
      gemm_pairs_(16, 64ull << 20, deps.budget->capacity() / 4) {}

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
    if (abandon_) {  // its journal slot stays taken: the next start counts it as lost
      ++abandoned_;
      d_.health->sample_dropped("shutdown");
    } else {
      process(*s);
    }
    s->lease.reset();
    d_.health->set_queue_bytes(d_.budget->used());
  }
}

void AnalysisPipeline::process(Sample& s) {
  Result<SampleAnalysis> analysis = analyzer_.analyze(s, d_.policy->get(s.client->job));
  if (!analysis.ok()) {
    spdlog::warn("analysis of {} from job {} failed: {}", s.header.layer(), s.client->job, analysis.message());
    d_.health->sample_dropped("analysis_error");
    if (s.journal) d_.journal->release(*s.journal);  // accounted for by the drop
    return;
  }
  publisher_.publish(s, analysis.value());
  if (s.journal) d_.history->add(*s.journal);  // after its records: released once they are committed
  if (!dtype_is_codes(s.dtype)) {
    if (std::optional<GemmPair> pair = gemm_pairs_.offer(std::move(s))) check_gemm(*pair);
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
    history::GemmOutputRecord rec;
    rec.time = time;
    rec.job = p.client->job;
    rec.run = p.client->run;
    rec.host = p.client->host;
    rec.rank = p.client->rank;
    rec.step = p.step;
    rec.layer = p.layer;
    rec.accumulate = r.accumulate;
    rec.numel = static_cast<std::int64_t>(r.rows * r.n);
    rec.scale_x = r.scale_x;
    rec.scale_w = r.scale_w;
    rec.mse = r.mse;
    rec.cosine = r.cosine;
    rec.max_rel_error = r.max_rel_error;
    d_.history->add(std::move(rec));
  }
}

}  // namespace fp8scope::server
