// Tensor series: ranks combine into the worst rank, the cap suppresses and counts new series, and
// series nobody updates expire.
#include "fp8scope/export/tensor_series.h"

#include <prometheus/text_serializer.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <vector>

using namespace fp8scope::server;
using Clock = TensorSeries::Clock;

namespace {

const prometheus::Labels kLabels = {{"job", "j"}, {"layer", "l"}, {"gemm", "fprop"}, {"operand", "x"},
                                    {"format", "e4m3"}, {"recipe", "tensor_current"}};

std::string exposition(prometheus::Registry& r) { return prometheus::TextSerializer().Serialize(r.Collect()); }

double value_of(prometheus::Registry& r, const std::string& name) {
  for (const auto& family : r.Collect()) {
    if (family.name == name && !family.metric.empty()) return family.metric[0].gauge.value;
  }
  return std::nan("");
}

}  // namespace

TEST_CASE("ranks combine into the worst rank: max, or min where lower is worse", "[tensor_series]") {
  prometheus::Registry registry;
  TensorSeries series(registry, SeriesOptions{});
  const MetricDef& underflow = *find_metric("fp8scope_underflow_ratio");
  const MetricDef& cosine = *find_metric("fp8scope_cosine_similarity");
  series.set(underflow, kLabels, {0}, 0.01);
  series.set(underflow, kLabels, {1}, 0.03);
  series.set(underflow, kLabels, {2}, std::nan(""));  // undefined on one rank does not hide the others
  CHECK(value_of(registry, "fp8scope_underflow_ratio") == 0.03);
  series.set(cosine, kLabels, {0}, 0.999);
  series.set(cosine, kLabels, {1}, 0.95);
  CHECK(value_of(registry, "fp8scope_cosine_similarity") == 0.95);
  series.set(underflow, kLabels, {1}, 0.0);  // rank 1 recovered
  CHECK(value_of(registry, "fp8scope_underflow_ratio") == 0.01);
  CHECK(series.series() == 2);
}

TEST_CASE("per-rank metrics carry a rank label instead", "[tensor_series]") {
  prometheus::Registry registry;
  SeriesOptions options;
  options.per_rank = true;
  TensorSeries series(registry, options);
  series.set(*find_metric("fp8scope_underflow_ratio"), kLabels, {3}, 0.5);
  CHECK(exposition(registry).find("rank=\"3\"") != std::string::npos);
}

TEST_CASE("the series cap suppresses new series and counts them", "[tensor_series]") {
  prometheus::Registry registry;
  SeriesOptions options;
  options.max_series = 5;
  TensorSeries series(registry, options);
  for (int i = 0; i < 8; ++i) {
    prometheus::Labels l = kLabels;
    l["layer"] = "layer" + std::to_string(i);
    series.set(*find_metric("fp8scope_mse"), l, {0}, 1.0);
  }
  CHECK(series.series() == 5);
  CHECK(series.suppressed() == 3);
  prometheus::Labels old = kLabels;
  old["layer"] = "layer0";
  CHECK(series.set(*find_metric("fp8scope_mse"), old, {0}, 2.0));  // existing series still update
}

TEST_CASE("series without updates expire", "[tensor_series]") {
  prometheus::Registry registry;
  SeriesOptions options;
  options.ttl = std::chrono::seconds(60);
  TensorSeries series(registry, options);
  const Clock::time_point t0 = Clock::now();
  series.set(*find_metric("fp8scope_amax"), {{"job", "j"}, {"layer", "old"}, {"gemm", "fprop"}, {"operand", "x"}}, {0}, 3.0, t0);
  series.set(*find_metric("fp8scope_amax"), {{"job", "j"}, {"layer", "new"}, {"gemm", "fprop"}, {"operand", "x"}}, {0}, 4.0,
             t0 + std::chrono::seconds(50));
  series.expire(t0 + std::chrono::seconds(90));
  CHECK(series.series() == 1);
  CHECK(exposition(registry).find("layer=\"old\"") == std::string::npos);
  CHECK(exposition(registry).find("layer=\"new\"") != std::string::npos);
}

TEST_CASE("a layer's experts combine into the worst expert, and the spread names it and the median", "[tensor_series]") {
  prometheus::Registry registry;
  TensorSeries series(registry, SeriesOptions{});
  const MetricDef& underflow = *find_metric("fp8scope_underflow_ratio");
  const double values[] = {0.01, 0.02, 0.30, 0.03};
  for (int e = 0; e < 4; ++e) series.set(underflow, kLabels, {0, e}, values[e]);
  CHECK(value_of(registry, "fp8scope_underflow_ratio") == 0.30);
  CHECK(series.series() == 1);
  const auto spread = series.expert_spread(underflow, kLabels);
  REQUIRE(spread);
  CHECK(spread->worst_expert == 2);
  CHECK(spread->worst == 0.30);
  CHECK(spread->median == Approx(0.025));
  CHECK(spread->experts == 4);
  const MetricDef& cosine = *find_metric("fp8scope_cosine_similarity");
  series.set(cosine, kLabels, {0, 5}, 0.999);
  series.set(cosine, kLabels, {0, 6}, 0.90);
  CHECK(series.expert_spread(cosine, kLabels)->worst_expert == 6);  // lower is worse
  series.set(*find_metric("fp8scope_mse"), kLabels, {0}, 1.0);
  CHECK_FALSE(series.expert_spread(*find_metric("fp8scope_mse"), kLabels));  // a dense tensor has no spread
}

TEST_CASE("per-expert metrics carry an expert label, inside the series cap", "[tensor_series]") {
  prometheus::Registry registry;
  SeriesOptions options;
  options.per_expert = true;
  options.max_series = 3;
  TensorSeries series(registry, options);
  for (int e = 0; e < 5; ++e) series.set(*find_metric("fp8scope_underflow_ratio"), kLabels, {0, e}, 0.1 * e);
  CHECK(series.series() == 3);
  CHECK(series.suppressed() == 2);
  CHECK(exposition(registry).find("expert=\"2\"") != std::string::npos);
  CHECK(exposition(registry).find("expert=\"3\"") == std::string::npos);
  CHECK_FALSE(series.expert_spread(*find_metric("fp8scope_underflow_ratio"), kLabels));
}

TEST_CASE("the worst member and the experts' median match a pass over every member, whatever the updates",
          "[tensor_series]") {
  // Random updates of ranks and experts (ties, NaN, repeats), then expiry: after each, the gauge
  // and the spread are what a pass over the members' last values gives (the first member holding
  // the worst value names it).
  std::mt19937 rng(11);
  for (const char* name : {"fp8scope_underflow_ratio", "fp8scope_cosine_similarity"}) {
    const MetricDef& metric = *find_metric(name);
    prometheus::Registry registry;
    TensorSeries series(registry, SeriesOptions{});
    std::map<std::pair<std::uint32_t, std::int64_t>, std::pair<double, Clock::time_point>> last;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < 2000; ++i) {
      const SeriesMember m{static_cast<std::uint32_t>(rng() % 5), static_cast<std::int64_t>(rng() % 9) - 1};
      const double v = rng() % 17 == 0 ? std::nan("") : static_cast<double>(rng() % 6) / 8;
      const Clock::time_point t = start + std::chrono::seconds(i);
      series.set(metric, kLabels, m, v, t);
      last[{m.rank, m.expert}] = {v, t};
      if (i % 500 == 499) {
        const Clock::time_point now = t + std::chrono::seconds(900) - std::chrono::seconds(300);
        series.expire(now);
        std::erase_if(last, [&](const auto& e) { return now - e.second.second > std::chrono::seconds(900); });
      }
      double worst = std::nan("");
      std::vector<double> experts;
      std::int64_t worst_expert = -1;
      double worst_expert_value = 0;
      for (const auto& [member, entry] : last) {  // in (rank, expert) order, as the series keys them
        const double x = entry.first;
        if (std::isnan(x)) continue;
        if (std::isnan(worst) || (metric.lower_is_worse ? x < worst : x > worst)) worst = x;
        if (member.second < 0) continue;
        experts.push_back(x);
        if (worst_expert < 0 || (metric.lower_is_worse ? x < worst_expert_value : x > worst_expert_value)) {
          worst_expert = member.second, worst_expert_value = x;
        }
      }
      INFO(name << " after update " << i);
      const double gauge = value_of(registry, name);
      CHECK(((std::isnan(gauge) && std::isnan(worst)) || gauge == worst));
      const std::optional<ExpertSpread> spread = series.expert_spread(metric, kLabels);
      REQUIRE(spread.has_value() == !experts.empty());
      if (experts.empty()) continue;
      std::sort(experts.begin(), experts.end());
      const std::size_t n = experts.size();
      CHECK(spread->experts == n);
      CHECK(spread->median == (n % 2 ? experts[n / 2] : (experts[n / 2 - 1] + experts[n / 2]) / 2));
      CHECK(spread->worst == worst_expert_value);
      CHECK(spread->worst_expert == worst_expert);
    }
  }
}
