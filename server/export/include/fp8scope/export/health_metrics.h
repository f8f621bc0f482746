// The daemon's own health as Prometheus metrics (the rows of metrics_table.cc without tensor
// labels): throughput, drops by reason, queue, analysis latency, clients.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <mutex>
#include <string>

#include "fp8scope/export/te_log_writer.h"

namespace fp8scope::server {

// Drop reasons of the daemon's own making, exported at 0 from the start: increase() over a counter
// that is born at 1 is 0, so without this the first drop of a kind would never alert.
inline const char* const kDaemonDropReasons[] = {"queue_full",   "too_large", "analysis_error", "client_gone_mid_sample",
                                                 "stalled",      "shutdown",  "journal_full", "scalar_queue_full"};

class HealthMetrics {
 public:
  HealthMetrics(prometheus::Registry& registry, const std::string& version, const std::string& backend,
                std::uint64_t queue_budget_bytes);

  void sample_received();
  void sample_dropped(const std::string& reason, std::uint64_t count = 1);
  void sample_analyzed(double seconds);
  void bytes_received(std::uint64_t bytes);
  void shared_memory_bytes(std::uint64_t bytes);  // of those, copied from clients' shared memory
  void set_queue_bytes(std::uint64_t bytes);
  void client_connected();
  void client_disconnected();
  void set_series(std::uint64_t series, std::uint64_t suppressed_total);
  void set_records_stored(std::uint64_t total);
  // The history writer's state now (HistoryStore::WriteHealth): totals, the backlog, and whether
  // the last write failed.
  void set_history_writes(std::uint64_t failed_total, std::uint64_t lost_total, std::uint64_t pending, bool failing);
  // Accepted samples: lost unstored (the previous daemon's, counted at start, or this one's), and
  // waiting for their records now.
  void acknowledged_lost(std::uint64_t count);
  void acknowledged_lost_before_start(std::uint64_t count);
  void set_unstored_samples(std::uint64_t count);
  void set_te_log(const TeLogCounts& counts);  // the --te-log-dir writer's totals now
  // A sample that came with its cast: analyzed from `source` ("cast", "recompute", or "noop" when
  // the cast wrote nothing), and the code check of fp8scope's model of `recipe` on it.
  void cast_analyzed(const std::string& job, const std::string& source);
  void cast_checked(const std::string& job, const std::string& recipe, std::uint64_t mismatches, std::uint64_t compared);

  // For the Admin status: the same numbers the metrics show.
  std::uint64_t samples_received() const;
  std::uint64_t samples_analyzed() const;
  std::map<std::string, std::uint64_t> dropped() const;
  std::uint64_t received_bytes() const;
  std::uint64_t clients() const;
  std::uint64_t records() const;
  std::uint64_t acknowledged_lost() const;  // by this daemon
  std::uint64_t acknowledged_lost_before_start() const;

 private:
  prometheus::Counter& samples_;
  prometheus::Counter& analyzed_;
  prometheus::Family<prometheus::Counter>& dropped_family_;
  prometheus::Counter& bytes_;
  prometheus::Counter& shared_bytes_;
  prometheus::Gauge& queue_bytes_;
  prometheus::Histogram& analysis_seconds_;
  prometheus::Gauge& clients_;
  prometheus::Gauge& series_;
  prometheus::Counter& suppressed_;
  prometheus::Counter& records_;
  prometheus::Counter& write_failures_;
  prometheus::Counter& records_lost_;
  prometheus::Gauge& pending_records_;
  prometheus::Gauge& write_failing_;
  prometheus::Counter& acknowledged_lost_;
  prometheus::Gauge& unstored_samples_;
  prometheus::Counter& te_log_lines_;
  std::array<prometheus::Counter*, std::size(kTeLogDropReasons)> te_log_dropped_{};
  prometheus::Gauge& te_log_bytes_;
  prometheus::Family<prometheus::Counter>& cast_samples_;
  prometheus::Family<prometheus::Counter>& cast_mismatches_;
  prometheus::Family<prometheus::Counter>& cast_compared_;
  mutable std::mutex mu_;
  std::map<std::string, std::uint64_t> dropped_;
  std::uint64_t lost_before_start_ = 0;
};

}  // namespace fp8scope::server
