// The tensor statistics as Prometheus series: one gauge per (metric, label set), combining ranks
// and a mixture-of-experts layer's experts into the worst one's value unless per-rank or
// per-expert labels were asked for, capped at max_series (new series beyond it are counted and
// suppressed) and expired when not updated for ttl. A series keeps its members' values in order,
// so an update, its worst and its experts' median cost O(log members), not a pass over thousands
// of experts or ranks.
#pragma once

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

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
  // (value, member) in order; with ranks (libstdc++'s order-statistics tree) for the median.
  using ByValue = std::set<std::pair<double, std::uint64_t>>;
  using RankedByValue = __gnu_pbds::tree<std::pair<double, std::uint64_t>, __gnu_pbds::null_type,
                                         std::less<std::pair<double, std::uint64_t>>, __gnu_pbds::rb_tree_tag,
                                         __gnu_pbds::tree_order_statistics_node_update>;
  struct Series {
    const MetricDef* metric;
    prometheus::Gauge* gauge;
    // By member: rank in the high 32 bits, expert + 1 in the low.
    std::map<std::uint64_t, std::pair<double, Clock::time_point>> by_member;
    ByValue by_value;              // every member's value but NaN
    RankedByValue experts_by_value;  // the experts' alone
    Clock::time_point updated;
  };
  static bool is_expert(std::uint64_t member) { return (member & 0xFFFFFFFFu) != 0; }
  // A member's value into and out of the ordered views (NaN is in none).
  static void remember(Series& s, std::uint64_t member, double value);
  static void forget(Series& s, std::uint64_t member, double value);
  void publish(Series& s);
  std::string key_of(const MetricDef& metric, prometheus::Labels& labels, SeriesMember member) const;

  SeriesOptions options_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> families_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Series> series_;
  std::uint64_t suppressed_ = 0;
};

}  // namespace fp8scope::server
