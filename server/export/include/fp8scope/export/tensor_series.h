// The tensor statistics as Prometheus series: one gauge per (metric, label set), combining ranks
// and a mixture-of-experts layer's experts into the worst one's value unless per-rank or
// per-expert labels were asked for, capped at max_series (new series beyond it are counted and
// suppressed) and expired when not updated for ttl.
#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "fp8scope/export/metrics_table.h"

namespace fp8scope::server {

struct SeriesOptions {
  std::uint64_t max_series = 20000;
  std::chrono::duration<double> ttl = std::chrono::seconds(900);
  bool per_rank = false;
  bool per_expert = false;
};

// Whose value a series holds among those it combines: a rank's, and an expert's (-1: none).
struct SeriesMember {
  std::uint32_t rank = 0;
  std::int64_t expert = -1;
};

// Where a layer's experts stand on one series: the worst one and the median of all.
struct ExpertSpread {
  std::int64_t worst_expert = -1;
  double worst = 0, median = 0;
  std::size_t experts = 0;
};

class TensorSeries {
 public:
  using Clock = std::chrono::steady_clock;
  TensorSeries(prometheus::Registry& registry, SeriesOptions options);

  // Sets one member's value. `labels` holds exactly the metric's labels (rank and expert are added
  // here with per_rank and per_expert). Returns false when the series was suppressed by the cap.
  bool set(const MetricDef& metric, const prometheus::Labels& labels, SeriesMember member, double value,
           Clock::time_point now = Clock::now());
  // The experts' values on a series set with these labels (over every rank); nothing when it has
  // no expert members (or they have labels of their own).
  std::optional<ExpertSpread> expert_spread(const MetricDef& metric, const prometheus::Labels& labels) const;

  // Removes series (and ranks) not updated since now - ttl.
  void expire(Clock::time_point now = Clock::now());

  std::uint64_t series() const;
  std::uint64_t suppressed() const;

 private:
  struct Series {
    const MetricDef* metric;
    prometheus::Gauge* gauge;
    // By member: rank in the high 32 bits, expert + 1 in the low.
    std::map<std::uint64_t, std::pair<double, Clock::time_point>> by_member;
    Clock::time_point updated;
  };
  void publish(Series& s);
  std::string key_of(const MetricDef& metric, prometheus::Labels& labels, SeriesMember member) const;

  SeriesOptions options_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> families_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Series> series_;
  std::uint64_t suppressed_ = 0;
};

}  // namespace fp8scope::server
