// Loss signals on synthetic curves whose truth is known: a decaying loss with noise, spikes planted
// at known steps with known heights and recoveries, and a run that diverges from a known step.
#include "fp8scope/insight/loss_signals.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "fp8scope/insight/run_comparison.h"

using namespace fp8scope::insight;

namespace {

struct Planted {
  std::uint64_t step;
  double height;            // multiplies the clean loss at `step`
  std::uint64_t recovery;   // steps over which the excess decays away (0: one point)
};

// A loss that decays from 4 to about 2 with 1% multiplicative noise, plus planted spikes.
std::vector<ScalarPoint> curve(std::size_t steps, const std::vector<Planted>& planted, unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::vector<ScalarPoint> s;
  for (std::uint64_t t = 0; t < steps; ++t) {
    double loss = 2.0 + 2.0 * std::exp(-static_cast<double>(t) / 300.0);
    double excess = 1.0;
    for (const Planted& p : planted) {
      if (t < p.step) continue;
      const double since = static_cast<double>(t - p.step);
      if (p.recovery == 0) {
        if (t == p.step) excess *= p.height;
      } else if (since <= static_cast<double>(p.recovery)) {
        excess *= 1.0 + (p.height - 1.0) * (1.0 - since / static_cast<double>(p.recovery));
      }
    }
    s.push_back({t, loss * excess * std::exp(noise(rng))});
  }
  return s;
}

}  // namespace

TEST_CASE("a clean noisy curve has no spikes and does not diverge", "[loss_signals]") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const auto s = curve(2000, {}, seed);
    CHECK(find_spikes(s).empty());
    CHECK_FALSE(find_divergence(s).has_value());
  }
}

TEST_CASE("planted spikes are found at their steps with their heights and recoveries", "[loss_signals]") {
  const auto s = curve(1000, {{200, 3.0, 0}, {500, 1.6, 20}, {800, 10.0, 60}});
  const auto spikes = find_spikes(s);
  REQUIRE(spikes.size() == 3);
  CHECK(spikes[0].start_step == 200);
  CHECK(spikes[0].peak_step == 200);
  CHECK(spikes[0].height == Approx(3.0).epsilon(0.05));
  REQUIRE(spikes[0].steps_to_recover());
  CHECK(*spikes[0].steps_to_recover() == 1);
  CHECK(spikes[1].start_step == 500);
  CHECK(spikes[1].height == Approx(1.6).epsilon(0.05));
  // The excess decays linearly; it is within 3 robust sigmas (about 3%) after ~95% of 20 steps.
  REQUIRE(spikes[1].steps_to_recover());
  CHECK(*spikes[1].steps_to_recover() >= 15);
  CHECK(*spikes[1].steps_to_recover() <= 20);
  CHECK(spikes[2].peak_step == 800);
  CHECK(spikes[2].height == Approx(10.0).epsilon(0.05));
  REQUIRE(spikes[2].steps_to_recover());
  CHECK(*spikes[2].steps_to_recover() > *spikes[1].steps_to_recover());
}

TEST_CASE("a NaN or infinite loss is a spike of unbounded height that may never recover", "[loss_signals]") {
  auto s = curve(300, {});
  for (std::size_t i = 150; i < s.size(); ++i) s[i].value = std::nan("");
  const auto spikes = find_spikes(s);
  REQUIRE(spikes.size() == 1);
  CHECK(spikes[0].start_step == 150);
  CHECK(std::isinf(spikes[0].height));
  CHECK_FALSE(spikes[0].recovered_step.has_value());
}

TEST_CASE("the first points give no verdict: there is no window yet", "[loss_signals]") {
  std::vector<ScalarPoint> s = {{0, 10.0}, {1, 100.0}, {2, 1000.0}};
  CHECK(find_spikes(s).empty());
}

TEST_CASE("divergence is found from the step the loss leaves its best level for good", "[loss_signals]") {
  auto s = curve(600, {});
  for (std::size_t i = 400; i < s.size(); ++i) s[i].value *= std::exp(static_cast<double>(i - 400) / 20.0);
  const auto d = find_divergence(s);
  REQUIRE(d.has_value());
  // 1.5x the best (about 2.5) is reached about 20*ln(1.5/1.0) ~ 8 steps after 400.
  CHECK(d->onset_step >= 400);
  CHECK(d->onset_step <= 415);
  CHECK(d->last > 1e3);
}

TEST_CASE("a spike that recovers is not divergence", "[loss_signals]") {
  const auto s = curve(600, {{300, 5.0, 50}});
  CHECK_FALSE(find_divergence(s).has_value());
}

TEST_CASE("compare: more frequent, slower spikes and divergence set the run apart", "[run_comparison]") {
  const auto baseline = analyze_run_loss("bf16", curve(2000, {{700, 2.0, 5}}, 3));
  SECTION("the same kind of curve is not worse") {
    const auto c = compare_loss(analyze_run_loss("fp8", curve(2000, {{900, 2.0, 5}}, 4)), baseline);
    CHECK_FALSE(c.run_worse);
    CHECK(c.findings.empty());
  }
  SECTION("four slow spikes against one fast one") {
    const auto fp8 = analyze_run_loss(
        "fp8", curve(2000, {{300, 3.0, 80}, {700, 3.0, 80}, {1100, 3.0, 80}, {1500, 3.0, 80}}, 4));
    REQUIRE(fp8.spikes.size() == 4);
    const auto c = compare_loss(fp8, baseline);
    CHECK(c.run_worse);
    REQUIRE(c.findings.size() == 2);
    CHECK_THAT(c.findings[0], Catch::Contains("spikes more often"));
    CHECK_THAT(c.findings[1], Catch::Contains("recovers more slowly"));
  }
  SECTION("divergence the baseline does not show comes first") {
    auto s = curve(2000, {}, 5);
    for (std::size_t i = 1500; i < s.size(); ++i) s[i].value *= std::exp(static_cast<double>(i - 1500) / 50.0);
    const auto c = compare_loss(analyze_run_loss("fp8", s), baseline);
    CHECK(c.run_worse);
    REQUIRE_FALSE(c.findings.empty());
    CHECK_THAT(c.findings[0], Catch::Contains("diverges from step 15"));
  }
}
