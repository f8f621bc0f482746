#include "fp8scope/export/tensor_series.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fp8scope::server {

TensorSeries::TensorSeries(prometheus::Registry& registry, SeriesOptions options) : options_(options) {
  for (const MetricDef& d : metric_definitions()) {
    const bool tensor = d.kind == MetricKind::kGauge && !d.labels.empty() && d.labels.front() == "job";
    if (!tensor) continue;
    families_[d.name] = &prometheus::BuildGauge().Name(d.name).Help(d.help).Register(registry);
  }
}

std::string TensorSeries::key_of(const MetricDef& metric, prometheus::Labels& labels, SeriesMember member) const {
  if (options_.per_rank) labels["rank"] = std::to_string(member.rank);
  if (options_.per_expert && member.expert >= 0) labels["expert"] = std::to_string(member.expert);
  std::string key = metric.name;
  for (const auto& [k, v] : labels) key += '\x1f' + k + '=' + v;
  return key;
}

bool TensorSeries::set(const MetricDef& metric, const prometheus::Labels& labels_in, SeriesMember member, double value,
                       Clock::time_point now) {
  prometheus::Labels labels = labels_in;
  const std::string key = key_of(metric, labels, member);
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
  const std::uint64_t rank = options_.per_rank ? 0 : member.rank;
  const std::int64_t expert = options_.per_expert ? -1 : member.expert;
  s.by_member[rank << 32 | static_cast<std::uint64_t>(expert + 1)] = {value, now};
  s.updated = now;
  publish(s);
  return true;
}

std::optional<ExpertSpread> TensorSeries::expert_spread(const MetricDef& metric, const prometheus::Labels& labels_in) const {
  if (options_.per_expert) return std::nullopt;
  prometheus::Labels labels = labels_in;
  const std::string key = key_of(metric, labels, SeriesMember{});
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = series_.find(key);
  if (it == series_.end()) return std::nullopt;
  ExpertSpread spread;
  std::vector<double> values;
  for (const auto& [member, entry] : it->second.by_member) {
    const std::int64_t expert = static_cast<std::int64_t>(member & 0xFFFFFFFFu) - 1;
    const double v = entry.first;
    if (expert < 0 || std::isnan(v)) continue;
    values.push_back(v);
    if (spread.worst_expert < 0 || (metric.lower_is_worse ? v < spread.worst : v > spread.worst)) {
      spread.worst_expert = expert, spread.worst = v;
    }
  }
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  spread.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  spread.experts = n;
  return spread;
}

// The worst member's value: the largest, or the smallest for statistics where lower is worse. NaN
// members (undefined statistics) count only when every member is NaN.
void TensorSeries::publish(Series& s) {
  double out = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [member, entry] : s.by_member) {
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
    for (auto r = s.by_member.begin(); r != s.by_member.end();) {
      r = now - r->second.second > options_.ttl ? s.by_member.erase(r) : std::next(r);
    }
    if (s.by_member.empty()) {
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
