// A long run read with bounded series: what compare and report conclude from the strided sample
// agrees with the whole series where the study promises it (onset attribution, the sampling
// interval, the last point), every kept point is the record it came from, and a series within the
// limit is read whole.
#include <catch2/catch.hpp>

#include <cmath>

#include "../../../support/temp_dir.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/insight/attribution.h"
#include "fp8scope/insight/run_records.h"
#include "fp8scope/kernels/statistics_table.h"

using namespace fp8scope;
using insight::RecordPoint;

namespace {

constexpr std::uint64_t kInterval = 10;
constexpr std::uint64_t kOnset = 12'340;     // a planted loss spike's first step
constexpr std::uint64_t kDivergence = 17'000;

// Two ranks sample three tensors under two recipes every kInterval steps; rank 1's values differ,
// so a point that is rank 1's where rank 0 sampled too shows. Tensor 1's underflow jumps at the
// onset; tensor 2's error jumps at the divergence.
std::unique_ptr<history::HistoryReader> write_run(const std::string& dir, std::uint64_t steps) {
  auto store = std::move(history::HistoryStore::open(dir, {"test:/data", 0})).value();
  const auto column = [](const char* name) {
    return static_cast<std::size_t>(find_statistic(name) - statistics().data());
  };
  for (std::uint64_t step = 0; step < steps; step += kInterval) {
    for (std::uint32_t rank : {1u, 0u}) {
      for (int t = 0; t < 3; ++t) {
        for (const RecipeKind recipe : {RecipeKind::kTensorCurrent, RecipeKind::kTensorDelayed}) {
          history::HistoryRecord r;
          r.job = "job";
          r.run = "fp8";
          r.rank = rank;
          r.step = step;
          r.layer = "blocks." + std::to_string(t);
          r.gemm = GemmRole::kFprop;
          r.operand = Operand::kX;
          r.dtype = DType::kBF16;
          r.caster = Caster::recipe(recipe);
          r.format = CastFormat::kE4M3;
          r.scale = 100.0 + static_cast<double>(step % 7);
          r.scale_current = 100.0;
          r.codes_digest = "digest-" + std::to_string(step) + "-" + std::to_string(rank);
          r.statistics.assign(statistics().size(), 0.0);
          const double noise = 1e-3 * static_cast<double>((step / kInterval * 7 + t) % 11) + rank;
          r.statistics[column("underflow_ratio")] = 0.01 + noise + (t == 1 && step >= kOnset && step < kOnset + 30 ? 0.5 : 0);
          r.statistics[column("mse")] = (1e-4 + noise * 1e-5) * (t == 2 && step >= kDivergence ? 1e3 : 1);
          r.statistics[column("cosine")] = 0.999;
          store->add(r);
        }
      }
      history::GemmOutputRecord g;
      g.job = "job";
      g.run = "fp8";
      g.rank = rank;
      g.step = step;
      g.layer = "blocks.0";
      g.accumulate = "fp32";
      g.mse = static_cast<double>(step) + rank;
      store->add(g);
    }
    if (step % 1000 == 0) REQUIRE(store->flush().ok());
  }
  REQUIRE(store->flush().ok());
  return std::move(history::open_history_reader(dir)).value();
}

insight::SeriesLimits limits_for(const std::vector<insight::Spike>& spikes, const std::optional<insight::Divergence>& d,
                                 std::size_t max_points) {
  return insight::attribution_limits(spikes, d, {}, max_points);
}

const RecordPoint* at_step(const std::vector<RecordPoint>& points, std::uint64_t step) {
  for (const RecordPoint& p : points) {
    if (p.step == step) return &p;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("a long run's series are thinned to the limit, and what the study reads from them stays exact") {
  testing::TempDir dir;
  const auto history = write_run(dir.path(), 20'000);
  std::vector<insight::Spike> spikes(1);
  spikes[0].start_step = kOnset;
  spikes[0].z = 9;
  const std::optional<insight::Divergence> divergence = insight::Divergence{kDivergence, 1, 2};

  auto full = insight::load_run_records(*history, "fp8", nullptr, insight::sample_limits(0));
  auto thin = insight::load_run_records(*history, "fp8", nullptr, limits_for(spikes, divergence, 64));
  REQUIRE(full.ok());
  REQUIRE(thin.ok());
  CHECK(full.value().thinned_series == 0);
  CHECK(insight::thinning_note(full.value()).empty());
  // 3 tensors x 2 recipes and one GEMM check, 2,000 steps each.
  CHECK(thin.value().thinned_series == 7);
  // 2,000 steps 10 apart: a point every 320 steps (32 sampled steps) is the first stride that
  // leaves no more than 64.
  CHECK(thin.value().widest_gap == 320);
  CHECK(thin.value().records == full.value().records);
  CHECK(thin.value().sampling_interval == kInterval);
  CHECK(full.value().sampling_interval == kInterval);
  CHECK_THAT(insight::thinning_note(thin.value()), Catch::Contains("7 series of run fp8 had more than 64 sampled steps"));

  for (const auto& [key, tensor] : thin.value().tensors) {
    for (const auto& [recipe, points] : tensor.recipes) {
      INFO(key.name() << " " << recipe.name());
      const std::vector<RecordPoint>& whole = full.value().tensors.at(key).recipes.at(recipe);
      REQUIRE(whole.size() == 2000);
      // An evenly spaced sample and the last step.
      CHECK(points.size() <= 64 + 1);
      CHECK(points.size() >= 32);
      const std::vector<RecordPoint>& onsets = tensor.onset_points.at(recipe);
      // Two onsets' windows (20 before, 8 from), but those the sample holds.
      CHECK(onsets.size() <= 2 * 28);
      CHECK(onsets.size() >= 2 * 28 - 4);
      for (const auto* kept : {&points, &onsets}) {
        for (std::size_t i = 0; i < kept->size(); ++i) {
          const RecordPoint& p = (*kept)[i];
          const RecordPoint* w = at_step(whole, p.step);
          REQUIRE(w != nullptr);
          CHECK(p.rank == 0);
          CHECK(p.statistics == w->statistics);
          CHECK(p.codes_digest == w->codes_digest);
          if (i > 0) CHECK(p.step > (*kept)[i - 1].step);
          if (kept == &onsets) CHECK(at_step(points, p.step) == nullptr);
        }
      }
      for (std::size_t i = 1; i + 1 < points.size(); ++i) CHECK(points[i].step - points[i - 1].step == 320);
      CHECK(points.back().step == whole.back().step);
      CHECK(points.back().codes_digest == "digest-19990-0");
    }
  }
  // Each onset is attributed from the same points whether the series was thinned or not.
  const auto a = insight::attribute_onsets(full.value(), spikes, divergence);
  const auto b = insight::attribute_onsets(thin.value(), spikes, divergence);
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 2);
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].suspects.size() == b[i].suspects.size());
    for (std::size_t j = 0; j < a[i].suspects.size(); ++j) {
      CHECK(a[i].suspects[j].tensor == b[i].suspects[j].tensor);
      CHECK(a[i].suspects[j].recipe == b[i].suspects[j].recipe);
      CHECK(a[i].suspects[j].signal == b[i].suspects[j].signal);
      CHECK(a[i].suspects[j].score == b[i].suspects[j].score);
      CHECK(a[i].suspects[j].before == b[i].suspects[j].before);
      CHECK(a[i].suspects[j].at_step == b[i].suspects[j].at_step);
    }
  }
  CHECK(a[0].suspects.front().tensor.layer == "blocks.1");
  CHECK(a[1].suspects.front().tensor.layer == "blocks.2");
  // The GEMM checks are thinned the same way, rank 0's.
  const auto& checks = thin.value().gemm_outputs.at("blocks.0").at("fp32");
  CHECK(checks.size() <= 64);
  for (const auto& c : checks) CHECK(c.mse == static_cast<double>(c.step));
}

TEST_CASE("series within the limit are read whole, as without one") {
  testing::TempDir dir;
  const auto history = write_run(dir.path(), 640);
  auto full = insight::load_run_records(*history, "fp8", nullptr, insight::sample_limits(0));
  auto bounded = insight::load_run_records(*history, "fp8", nullptr, insight::sample_limits(64));
  REQUIRE(full.ok());
  REQUIRE(bounded.ok());
  CHECK(bounded.value().thinned_series == 0);
  REQUIRE(full.value().tensors.size() == bounded.value().tensors.size());
  for (const auto& [key, tensor] : full.value().tensors) {
    for (const auto& [recipe, points] : tensor.recipes) {
      CHECK(bounded.value().tensors.at(key).onset_points.empty());
      const auto& other = bounded.value().tensors.at(key).recipes.at(recipe);
      REQUIRE(other.size() == 64);
      for (std::size_t i = 0; i < points.size(); ++i) {
        CHECK(other[i].step == points[i].step);
        CHECK(other[i].statistics == points[i].statistics);
      }
    }
  }
  CHECK(bounded.value().gemm_outputs.at("blocks.0").at("fp32").size() == 64);
}

TEST_CASE("the onsets kept whole are the divergence and the highest spikes, as many as fit") {
  std::vector<insight::Spike> spikes(30);
  for (std::size_t i = 0; i < spikes.size(); ++i) {
    spikes[i].start_step = 100 * (i + 1);
    spikes[i].z = static_cast<double>(i % 7);
  }
  const auto limits = limits_for(spikes, insight::Divergence{5000, 1, 2}, 112);
  // 112 points hold four onsets of 20 + 8.
  REQUIRE(limits.whole_at.size() == 4);
  CHECK(limits.whole_at[0] == 5000 - 2);
  // z = 6 first: spikes 7, 14 and 21 (1-based), in their order.
  CHECK(limits.whole_at[1] == 700 - 2);
  CHECK(limits.whole_at[2] == 1400 - 2);
  CHECK(limits.whole_at[3] == 2100 - 2);
  CHECK(limits_for(spikes, std::nullopt, 0).whole_at.empty());
}
