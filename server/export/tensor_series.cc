#include "fp8scope/export/tensor_series.h"

#include <cmath>
#include <limits>

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
    it = series_.emplace(key, Series{&metric, &family->second->Add(labels), {}, {}, {}, now}).first;
  }
  Series& s = it->second;
  const std::uint64_t rank = options_.per_rank ? 0 : member.rank;
  const std::int64_t expert = options_.per_expert ? -1 : member.expert;
  const std::uint64_t key_of_member = rank << 32 | static_cast<std::uint64_t>(expert + 1);
  const auto [at, fresh] = s.by_member.try_emplace(key_of_member, value, now);
  if (!fresh) {
    forget(s, key_of_member, at->second.first);
    at->second = {value, now};
  }
  remember(s, key_of_member, value);
  s.updated = now;
  publish(s);
  return true;
}

void TensorSeries::remember(Series& s, std::uint64_t member, double value) {
  if (std::isnan(value)) return;
  s.by_value.emplace(value, member);
  if (is_expert(member)) s.experts_by_value.insert({value, member});
}

void TensorSeries::forget(Series& s, std::uint64_t member, double value) {
  if (std::isnan(value)) return;
  s.by_value.erase({value, member});
  if (is_expert(member)) s.experts_by_value.erase({value, member});
}

std::optional<ExpertSpread> TensorSeries::expert_spread(const MetricDef& metric, const prometheus::Labels& labels_in) const {
  if (options_.per_expert) return std::nullopt;
  prometheus::Labels labels = labels_in;
  const std::string key = key_of(metric, labels, SeriesMember{});
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = series_.find(key);
  if (it == series_.end()) return std::nullopt;
  const RankedByValue& values = it->second.experts_by_value;
  const std::size_t n = values.size();
  if (n == 0) return std::nullopt;
  // The worst value, and of the members holding it the first by rank and expert.
  const double worst = metric.lower_is_worse ? values.begin()->first : values.rbegin()->first;
  const std::uint64_t member = values.lower_bound({worst, 0})->second;
  ExpertSpread spread;
  spread.worst_expert = static_cast<std::int64_t>(member & 0xFFFFFFFFu) - 1;
  spread.worst = worst;
  const auto at = [&](std::size_t k) { return values.find_by_order(k)->first; };
  spread.median = n % 2 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
  spread.experts = n;
  return spread;
}

// The worst member's value: the largest, or the smallest for statistics where lower is worse. NaN
// members (undefined statistics) count only when every member is NaN.
void TensorSeries::publish(Series& s) {
  if (s.by_value.empty()) return s.gauge->Set(std::numeric_limits<double>::quiet_NaN());
  s.gauge->Set(s.metric->lower_is_worse ? s.by_value.begin()->first : s.by_value.rbegin()->first);
}

void TensorSeries::expire(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = series_.begin(); it != series_.end();) {
    Series& s = it->second;
    for (auto r = s.by_member.begin(); r != s.by_member.end();) {
      if (now - r->second.second > options_.ttl) {
        forget(s, r->first, r->second.first);
        r = s.by_member.erase(r);
      } else {
        ++r;
      }
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
