// The derived statistics: each row's formula on numbers worked by hand, and the table's own rules.
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/kernels/cpu_engine.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>
#include <string>
#include <vector>

using namespace fp8scope;

namespace {
double value(const char* key, const TensorMoments& m, const QuantStats& q) { return find_statistic(key)->compute(m, q); }
}  // namespace

TEST_CASE("derived statistics from known accumulators", "[statistics_table]") {
  TensorMoments m;
  m.numel = 10;
  m.finite = 9;
  m.nonzero = 8;
  m.nan = 1;
  m.amax = 8.0f;
  m.amin = 0.5f;
  m.sum = 18.0;
  m.sum_squares = 100.0;
  m.m2 = 36.0;
  QuantStats q;
  q.underflow = 2;
  q.overflow = 1;
  q.saturated = 3;
  q.squared_error = 1.0;
  q.dot = 90.0;
  q.dequant_squares = 81.0;
  CHECK(value("underflow_ratio", m, q) == 0.2);
  CHECK(value("underflow_nonzero_ratio", m, q) == 0.25);
  CHECK(value("overflow_ratio", m, q) == 0.1);
  CHECK(value("saturation_ratio", m, q) == Approx(0.3));
  CHECK(value("nonfinite_ratio", m, q) == 0.1);
  CHECK(value("zero_ratio", m, q) == 0.1);
  CHECK(value("mse", m, q) == Approx(1.0 / 9.0));
  CHECK(value("cosine", m, q) == Approx(90.0 / (10.0 * 9.0)));
  CHECK(value("sqnr_db", m, q) == Approx(20.0));
  CHECK(value("dynamic_range_log2", m, q) == 4.0);
  CHECK(value("mean", m, q) == 2.0);
  CHECK(value("std", m, q) == 2.0);
  m.m4 = 288.0;  // 9 * 288 / 36²
  CHECK(value("kurtosis", m, q) == 2.0);
}

TEST_CASE("kurtosis of worked distributions: 1 for two points, 1.8 for a uniform grid, 3 for a normal",
          "[statistics_table]") {
  auto kurtosis_of = [](const std::vector<double>& x) {
    TensorMoments m;
    for (double v : x) m.sum += v;
    m.numel = m.finite = x.size();
    const double mean = m.sum / static_cast<double>(x.size());
    for (double v : x) {
      m.m2 += (v - mean) * (v - mean);
      m.m4 += std::pow(v - mean, 4);
    }
    return value("kurtosis", m, QuantStats{});
  };
  CHECK(kurtosis_of({-3.0, 5.0}) == Approx(1.0));
  std::vector<double> grid;
  for (int i = 0; i < 100001; ++i) grid.push_back(i * 1e-5);
  CHECK(kurtosis_of(grid) == Approx(1.8).epsilon(1e-4));
  // A normal's quantiles at evenly spaced probabilities, each found by bisection on erfc; the tails
  // past 1/20000 are missing, which takes 0.4% off.
  std::vector<double> normal;
  for (int i = 1; i < 20000; ++i) {
    const double p = i / 20000.0;
    double lo = -10.0, hi = 10.0;
    for (int k = 0; k < 80; ++k) {
      const double mid = 0.5 * (lo + hi);
      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
    }
    normal.push_back(0.5 * (lo + hi));
  }
  CHECK(kurtosis_of(normal) == Approx(2.988).epsilon(1e-3));
  CHECK(std::isnan(kurtosis_of({4.0, 4.0, 4.0})));  // no spread: undefined
}

// TE's LogTensorStats stats (debug/features/utils/stats_computation.py:210-231 at d0067d0).
TEST_CASE("min, max, l1_norm and l2_norm are TE's torch.min, torch.max, torch.norm(x, 1) and sqrt(sum x^2)",
          "[statistics_table]") {
  const std::vector<float> x = {-3.0f, 0.0f, 4.0f, -0.5f};
  auto engine = make_cpu_engine(1);
  TensorAnalysis a;
  REQUIRE(engine->analyze(TensorView{x.data(), DType::kF32, 1, 4, 1.0f}, {}, &a).ok());
  const QuantStats q;
  CHECK(value("min", a.moments, q) == -3.0);
  CHECK(value("max", a.moments, q) == 4.0);
  CHECK(value("l1_norm", a.moments, q) == 7.5);
  CHECK(value("l2_norm", a.moments, q) == std::sqrt(9.0 + 16.0 + 0.25));
  // All negative: the max is signed, not an amax.
  const std::vector<float> negative = {-2.0f, -1.0f};
  REQUIRE(engine->analyze(TensorView{negative.data(), DType::kF32, 1, 2, 1.0f}, {}, &a).ok());
  CHECK(value("max", a.moments, q) == -1.0);
  CHECK(value("amax", a.moments, q) == 2.0);
}

TEST_CASE("undefined statistics are NaN, lossless casts are +Inf dB", "[statistics_table]") {
  TensorMoments m;
  m.numel = 4;
  m.finite = 4;
  QuantStats q;
  CHECK(std::isnan(value("amin", m, q)));
  CHECK(std::isnan(value("dynamic_range_log2", m, q)));
  CHECK(value("cosine", m, q) == 1.0);  // all zero, cast to all zero
  CHECK(std::isinf(value("sqnr_db", m, q)));
  // Nothing finite to compare (an all-NaN tensor): not "identical" and not lossless, but undefined.
  m.finite = 0;
  m.nan = 4;
  for (const char* key : {"cosine", "sqnr_db", "mse", "mean", "amax", "kurtosis", "min", "max", "l1_norm", "l2_norm"}) {
    INFO(key);
    CHECK(std::isnan(value(key, m, q)));
  }
}

TEST_CASE("names follow Prometheus conventions and are unique", "[statistics_table]") {
  std::set<std::string> names;
  const std::regex metric_name("[a-z][a-z0-9_]*");
  const std::set<std::string> units = {"ratio", "elements", "channels", "value", "dB", "log2", "1"};
  for (const Statistic& s : statistics()) {
    INFO(s.key);
    CHECK(names.insert(s.metric_name()).second);
    CHECK(std::regex_match(std::string(s.metric_name()), metric_name));
    CHECK(units.count(s.unit) == 1);
    CHECK(std::strlen(s.help) > 10);
    if (std::string(s.unit) == "ratio") CHECK(std::string(s.metric_name()).find("_ratio") != std::string::npos);
  }
}
