// Outlier channels from channel amaxes: worked cases for the median (upper for an even count), the
// ratio's edge cases (a zero median, an Inf channel, nothing to compare), and a property test
// against sorting the amaxes on random tensors; the statistics table reads the summary.
#include "fp8scope/kernels/channel_summary.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "fp8scope/kernels/statistics_table.h"

using namespace fp8scope;

namespace {

double table_value(const char* key, const ChannelSummary& c) {
  return find_statistic(key)->value(TensorMoments{}, QuantStats{}, c);
}

}  // namespace

TEST_CASE("one channel 40x the others is the one outlier, and the ratio is 40", "[channel_summary]") {
  const ChannelSummary c = summarize_channels(std::vector<float>{1, 1, 40, 1, 1});
  CHECK(c.channels == 5);
  CHECK(c.median == 1.0);
  CHECK(c.largest == 40.0);
  CHECK(c.amax_ratio() == 40.0);
  CHECK(c.outliers == std::vector<std::uint32_t>{2});
  CHECK(c.persistent == c.outliers);  // a lone tensor's outliers are its persistent ones
  CHECK(table_value("channel_amax_ratio", c) == 40.0);
  CHECK(table_value("outlier_channels", c) == 1.0);
  CHECK(table_value("persistent_outlier_channels", c) == 1.0);
}

TEST_CASE("an even count takes the upper median, and the factor is strict", "[channel_summary]") {
  const ChannelSummary c = summarize_channels(std::vector<float>{100, 2, 3, 1});
  CHECK(c.median == 3.0);
  CHECK(c.amax_ratio() == Approx(100.0 / 3.0));
  CHECK(c.outliers == std::vector<std::uint32_t>{0});
  // Exactly 8x the median is not above it.
  CHECK(summarize_channels(std::vector<float>{24, 2, 3, 1}).outliers.empty());
  CHECK(summarize_channels(std::vector<float>{24, 2, 3, 1}, 7.9).outliers == std::vector<std::uint32_t>{0});
}

TEST_CASE("a zero median makes every nonzero channel an outlier and the ratio infinite", "[channel_summary]") {
  const ChannelSummary zero_median = summarize_channels(std::vector<float>{0, 5, 0, 0});
  CHECK(zero_median.median == 0.0);
  CHECK(std::isinf(zero_median.amax_ratio()));
  CHECK(zero_median.outliers == std::vector<std::uint32_t>{1});
  const ChannelSummary all_zero = summarize_channels(std::vector<float>{0, 0, 0});
  CHECK(std::isnan(all_zero.amax_ratio()));
  CHECK(all_zero.outliers.empty());
  const ChannelSummary with_inf = summarize_channels(std::vector<float>{1, INFINITY, 1});
  CHECK(std::isinf(with_inf.amax_ratio()));
  CHECK(with_inf.outliers == std::vector<std::uint32_t>{1});
}

TEST_CASE("no channels computed (a gradient, the job's codes): every channel statistic is undefined", "[channel_summary]") {
  const ChannelSummary none;
  for (const Statistic& s : statistics()) {
    if (s.per_channel()) CHECK(std::isnan(s.value(TensorMoments{}, QuantStats{}, none)));
  }
  CHECK(std::count_if(statistics().begin(), statistics().end(), [](const Statistic& s) { return s.per_channel(); }) == 3);
}

TEST_CASE("median, largest and outliers agree with sorting the amaxes, for odd and even counts", "[channel_summary]") {
  std::mt19937 rng(7);
  std::lognormal_distribution<float> spread(0.0f, 1.5f);
  for (int round = 0; round < 200; ++round) {
    std::vector<float> amax(static_cast<std::size_t>(1 + round % 37));
    for (float& a : amax) a = spread(rng);
    std::vector<float> sorted = amax;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const ChannelSummary c = summarize_channels(amax, 4.0);
    INFO("round " << round);
    CHECK(c.median == median);
    CHECK(c.largest == sorted.back());
    std::vector<std::uint32_t> want;
    for (std::size_t k = 0; k < amax.size(); ++k) {
      if (static_cast<double>(amax[k]) > 4.0 * median) want.push_back(static_cast<std::uint32_t>(k));
    }
    CHECK(c.outliers == want);
  }
}
