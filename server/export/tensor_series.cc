#include "fp8scope/export/tensor_series.h"

#include <cmath>
#include <limits>

namespace fp8scope::server {

TensorSeries::TensorSeries(prometheus::Registry& registry, SeriesOptions options) : options_(options) {
  for (const MetricDef& d : metric_definitions()) {
    const bool tensor = !d.labels.empty() && d.labels.front() == "job";
    if (!tensor) continue;
    families_[d.name] = &prometheus::BuildGauge().Name(d.name).Help(d.help).Register(registry);
  }
}

bool TensorSeries::set(const MetricDef& metric, const prometheus::Labels& labels_in, std::uint32_t rank, double value,
                       Clock::time_point now) {
  prometheus::Labels labels = labels_in;
  if (options_.per_rank) labels["rank"] = std::to_string(rank);
  std::string key = metric.name;
  for (const auto& [k, v] : labels) key += '\x1f' + k + '=' + v;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(key);
  if (it == series_.end()) {
    if (series_.size() >= options_.max_series) {
      ++suppressed_;
      return false;
    }
    auto family = families_.find(metric.name);
    if (family == families_.end()) return false;
    it = series_.emplace(key, Series{&metric, &family->second->Add(labels), {}, now}).first;
  }
  Series& s = it->second;
  s.by_rank[options_.per_rank ? 0 : rank] = {value, now};
  s.updated = now;
  publish(s);
  return true;
}

// The worst rank's value: the largest, or the smallest for statistics where lower is worse. NaN
// ranks (undefined statistics) count only when every rank is NaN.
void TensorSeries::publish(Series& s) {
  double out = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [rank, entry] : s.by_rank) {
    const double v = entry.first;
    if (std::isnan(v)) continue;
    if (std::isnan(out) || (s.metric->lower_is_worse ? v < out : v > out)) out = v;
  }
  s.gauge->Set(out);
}

void TensorSeries::expire(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = series_.begin(); it != series_.end();) {
    Series& s = it->second;
    for (auto r = s.by_rank.begin(); r != s.by_rank.end();) {
      r = now - r->second.second > options_.ttl ? s.by_rank.erase(r) : std::next(r);
    }
    if (s.by_rank.empty()) {
      families_.at(s.metric->name)->Remove(s.gauge);
      it = series_.erase(it);
    } else {
      publish(s);
      ++it;
    }
  }
}

std::uint64_t TensorSeries::series() const {
  std::lock_guard<std::mutex> lock(mu_);
  return series_.size();
}

std::uint64_t TensorSeries::suppressed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suppressed_;
}

}  // namespace fp8scope::server
