#include "fp8scope/export/health_metrics.h"

#include "fp8scope/export/metrics_table.h"

namespace fp8scope::server {
namespace {

template <class Builder>
auto& family(Builder builder, const char* name, prometheus::Registry& registry) {
  return builder.Name(name).Help(find_metric(name)->help).Register(registry);
}

// A counter set to a total kept elsewhere (it only ever grows).
void raise_to(prometheus::Counter& counter, std::uint64_t total) {
  if (static_cast<double>(total) > counter.Value()) counter.Increment(static_cast<double>(total) - counter.Value());
}

}  // namespace

HealthMetrics::HealthMetrics(prometheus::Registry& r, const std::string& version, const std::string& backend,
                             std::uint64_t queue_budget_bytes)
    : samples_(family(prometheus::BuildCounter(), "fp8scope_samples_total", r).Add({})),
      analyzed_(family(prometheus::BuildCounter(), "fp8scope_samples_analyzed_total", r).Add({})),
      dropped_family_(family(prometheus::BuildCounter(), "fp8scope_samples_dropped_total", r)),
      bytes_(family(prometheus::BuildCounter(), "fp8scope_received_bytes_total", r).Add({})),
      shared_bytes_(family(prometheus::BuildCounter(), "fp8scope_shared_memory_bytes_total", r).Add({})),
      queue_bytes_(family(prometheus::BuildGauge(), "fp8scope_queue_bytes", r).Add({})),
      // Analysis latency from 100 us to ~100 s.
      analysis_seconds_(family(prometheus::BuildHistogram(), "fp8scope_analysis_seconds", r)
                            .Add({}, prometheus::Histogram::BucketBoundaries{1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1,
                                                                             0.3, 1.0, 3.0, 10.0, 30.0, 100.0})),
      clients_(family(prometheus::BuildGauge(), "fp8scope_clients", r).Add({})),
      series_(family(prometheus::BuildGauge(), "fp8scope_series", r).Add({})),
      suppressed_(family(prometheus::BuildCounter(), "fp8scope_series_suppressed_total", r).Add({})),
      records_(family(prometheus::BuildCounter(), "fp8scope_records_stored_total", r).Add({})),
      write_failures_(family(prometheus::BuildCounter(), "fp8scope_history_write_failures_total", r).Add({})),
      records_lost_(family(prometheus::BuildCounter(), "fp8scope_history_records_lost_total", r).Add({})),
      pending_records_(family(prometheus::BuildGauge(), "fp8scope_history_pending_records", r).Add({})),
      write_failing_(family(prometheus::BuildGauge(), "fp8scope_history_write_failing", r).Add({})),
      acknowledged_lost_(family(prometheus::BuildCounter(), "fp8scope_acknowledged_samples_lost_total", r).Add({})),
      unstored_samples_(family(prometheus::BuildGauge(), "fp8scope_unstored_accepted_samples", r).Add({})),
      te_log_lines_(family(prometheus::BuildCounter(), "fp8scope_te_log_lines_total", r).Add({})),
      te_log_bytes_(family(prometheus::BuildGauge(), "fp8scope_te_log_bytes", r).Add({})),
      cast_samples_(family(prometheus::BuildCounter(), "fp8scope_cast_samples_total", r)),
      cast_mismatches_(family(prometheus::BuildCounter(), "fp8scope_cast_code_mismatches_total", r)),
      cast_compared_(family(prometheus::BuildCounter(), "fp8scope_cast_codes_compared_total", r)) {
  auto& te_log_dropped = family(prometheus::BuildCounter(), "fp8scope_te_log_lines_dropped_total", r);
  for (std::size_t i = 0; i < te_log_dropped_.size(); ++i) {
    te_log_dropped_[i] = &te_log_dropped.Add({{"reason", kTeLogDropReasons[i]}});
  }
  family(prometheus::BuildGauge(), "fp8scope_queue_budget_bytes", r).Add({}).Set(static_cast<double>(queue_budget_bytes));
  for (const char* reason : kDaemonDropReasons) dropped_family_.Add({{"reason", reason}});
  family(prometheus::BuildGauge(), "fp8scope_build_info", r).Add({{"version", version}, {"backend", backend}}).Set(1);
}

void HealthMetrics::sample_received() { samples_.Increment(); }

void HealthMetrics::sample_dropped(const std::string& reason, std::uint64_t count) {
  dropped_family_.Add({{"reason", reason}}).Increment(static_cast<double>(count));
  std::lock_guard<std::mutex> lock(mu_);
  dropped_[reason] += count;
}

void HealthMetrics::sample_analyzed(double seconds) {
  analyzed_.Increment();
  analysis_seconds_.Observe(seconds);
}

void HealthMetrics::bytes_received(std::uint64_t bytes) { bytes_.Increment(static_cast<double>(bytes)); }
void HealthMetrics::shared_memory_bytes(std::uint64_t bytes) { shared_bytes_.Increment(static_cast<double>(bytes)); }
void HealthMetrics::set_queue_bytes(std::uint64_t bytes) { queue_bytes_.Set(static_cast<double>(bytes)); }
void HealthMetrics::client_connected() { clients_.Increment(); }
void HealthMetrics::client_disconnected() { clients_.Decrement(); }

void HealthMetrics::set_series(std::uint64_t series, std::uint64_t suppressed_total) {
  series_.Set(static_cast<double>(series));
  raise_to(suppressed_, suppressed_total);
}

void HealthMetrics::set_records_stored(std::uint64_t total) {
  raise_to(records_, total);
}

void HealthMetrics::set_te_log(const TeLogCounts& counts) {
  raise_to(te_log_lines_, counts.lines);
  for (std::size_t i = 0; i < te_log_dropped_.size(); ++i) raise_to(*te_log_dropped_[i], counts.dropped[i]);
  te_log_bytes_.Set(static_cast<double>(counts.bytes));
}

void HealthMetrics::set_history_writes(std::uint64_t failed_total, std::uint64_t lost_total, std::uint64_t pending,
                                       bool failing) {
  raise_to(write_failures_, failed_total);
  raise_to(records_lost_, lost_total);
  pending_records_.Set(static_cast<double>(pending));
  write_failing_.Set(failing ? 1 : 0);
}

std::uint64_t HealthMetrics::samples_received() const { return static_cast<std::uint64_t>(samples_.Value()); }
std::uint64_t HealthMetrics::samples_analyzed() const { return static_cast<std::uint64_t>(analyzed_.Value()); }
std::map<std::string, std::uint64_t> HealthMetrics::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}
std::uint64_t HealthMetrics::received_bytes() const { return static_cast<std::uint64_t>(bytes_.Value()); }
std::uint64_t HealthMetrics::clients() const { return static_cast<std::uint64_t>(clients_.Value()); }
std::uint64_t HealthMetrics::records() const { return static_cast<std::uint64_t>(records_.Value()); }

void HealthMetrics::acknowledged_lost(std::uint64_t count) { acknowledged_lost_.Increment(static_cast<double>(count)); }
void HealthMetrics::acknowledged_lost_before_start(std::uint64_t count) {
  acknowledged_lost_.Increment(static_cast<double>(count));
  std::lock_guard<std::mutex> lock(mu_);
  lost_before_start_ += count;
}
void HealthMetrics::set_unstored_samples(std::uint64_t count) { unstored_samples_.Set(static_cast<double>(count)); }
std::uint64_t HealthMetrics::acknowledged_lost() const {
  return static_cast<std::uint64_t>(acknowledged_lost_.Value()) - acknowledged_lost_before_start();
}
std::uint64_t HealthMetrics::acknowledged_lost_before_start() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_before_start_;
}

void HealthMetrics::cast_analyzed(const std::string& job, const std::string& source) {
  cast_samples_.Add({{"job", job}, {"source", source}}).Increment();
}

void HealthMetrics::cast_checked(const std::string& job, const std::string& recipe, std::uint64_t mismatches,
                                 std::uint64_t compared) {
  const prometheus::Labels labels{{"job", job}, {"recipe", recipe}};
  cast_mismatches_.Add(labels).Increment(static_cast<double>(mismatches));
  cast_compared_.Add(labels).Increment(static_cast<double>(compared));
}

}  // namespace fp8scope::server
