// The tensor statistics as Prometheus series: one gauge per (metric, label set), combining ranks
// into the worst rank's value unless per-rank labels were asked for, capped at max_series (new
// series beyond it are counted and suppressed) and expired when not updated for ttl.
#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fp8scope/export/metrics_table.h"

namespace fp8scope::server {

struct SeriesOptions {
  std::uint64_t max_series = 20000;
  std::chrono::duration<double> ttl = std::chrono::seconds(900);
  bool per_rank = false;
};

class TensorSeries {
 public:
  using Clock = std::chrono::steady_clock;
  TensorSeries(prometheus::Registry& registry, SeriesOptions options);

  // Sets one value for one rank. `labels` holds exactly the metric's labels (rank is added here
  // with per_rank). Returns false when the series was suppressed by the cap.
  bool set(const MetricDef& metric, const prometheus::Labels& labels, std::uint32_t rank, double value,
           Clock::time_point now = Clock::now());

  // Removes series (and ranks) not updated since now - ttl.
  void expire(Clock::time_point now = Clock::now());

  std::uint64_t series() const;
  std::uint64_t suppressed() const;

 private:
  struct Series {
    const MetricDef* metric;
    prometheus::Gauge* gauge;
    std::map<std::uint32_t, std::pair<double, Clock::time_point>> by_rank;
    Clock::time_point updated;
  };
  void publish(Series& s);

  SeriesOptions options_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> families_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Series> series_;
  std::uint64_t suppressed_ = 0;
};

}  // namespace fp8scope::server
