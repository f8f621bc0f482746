#include "fp8scope/daemon/analysis_pipeline.h"

#include <spdlog/spdlog.h>

namespace fp8scope::server {

AnalysisPipeline::AnalysisPipeline(PipelineDeps deps)
    : d_(deps),
      analyzer_(*deps.engine, deps.max_tensors, deps.outlier_channels),
      publisher_(*deps.series, *deps.tensors, *deps.history, deps.exported, deps.te_log),
      // Waiting GEMM operands keep their leases: at most a quarter of the queue budget.
      gemm_pairs_(16, 64ull << 20, deps.budget->capacity() / 4),
      gemm_checker_(deps.gemm) {}

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
  while (std::optional<IngestItem> item = d_.queue->pop(shard)) {
    if (ScalarMark* scalar = std::get_if<ScalarMark>(&*item)) {
      publisher_.publish_scalar(*scalar);
      continue;
    }
    Sample& s = std::get<Sample>(*item);
    if (abandon_) {  // its journal slot stays taken: the next start counts it as lost
      ++abandoned_;
      d_.health->sample_dropped("shutdown");
    } else {
      process(s);
    }
    s.lease.reset();
    d_.health->set_queue_bytes(d_.budget->used());
  }
}

void AnalysisPipeline::process(Sample& s) {
  const SamplingPolicy policy = d_.policy->get(s.client->job);
  Result<SampleAnalysis> analysis = analyzer_.analyze(s, policy);
  if (!analysis.ok()) return drop(s, analysis.message());
  publisher_.publish(s, analysis.value(), policy);  // the records and the journal ticket, written together
  if (s.header.cast) {
    const RecipeOutcome& own = analysis.value().recipes.front();
    d_.health->cast_analyzed(s.client->job, analysis.value().cast_noop ? "noop" : data_source_name(own.source));
    if (own.job_recipe && own.stats.codes_compared > 0) {
      d_.health->cast_checked(s.client->job, recipe_name(*own.job_recipe), own.stats.code_mismatches,
                              own.stats.codes_compared);
    }
  }
  if (!dtype_is_codes(s.header.dtype)) {
    if (std::optional<GemmPair> pair = gemm_pairs_.offer(std::move(s))) {
      publisher_.publish_gemm_check(*pair, gemm_checker_.check(*pair));
    }
  }
  d_.health->sample_analyzed(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - s.completed).count());
}

void AnalysisPipeline::drop(const Sample& s, const std::string& why) {
  spdlog::warn("analysis of {} from job {} failed: {}", s.header.layer, s.client->job, why);
  d_.health->sample_dropped("analysis_error");
  if (s.journal) d_.journal->release(*s.journal);  // accounted for by the drop
}

}  // namespace fp8scope::server
