// A sample's analysis as a value: the policy's recipes in its order (all of them when it names
// none), the format an operand takes, delayed scaling from each tensor's own amax history in TE's
// order (this step's scale from the history before this step's amax joins it), the fingerprint a
// weight's current-scaling cast leaves for the inference check, and a job's own FP8 codes read
// with their scale.
#include "fp8scope/analysis/sample_analysis.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/statistics_table.h"
#include "support/server_samples.h"

using namespace fp8scope;
using namespace fp8scope::server;
using fp8scope::testing::e4m3_sample;
using fp8scope::testing::f32_sample;

namespace {

double stat(const SampleAnalysis& a, const RecipeOutcome& o, const char* key) {
  return find_statistic(key)->compute(a.moments, o.stats);
}

SamplingPolicy recipes(std::vector<RecipeKind> kinds) {
  SamplingPolicy p;
  p.recipes = std::move(kinds);
  return p;
}

}  // namespace

TEST_CASE("the policy's recipes in its order, the default recipes when it names none", "[sample_analysis]") {
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  const Sample s = f32_sample("l", 1, Operand::kX, {0.5f, -2.0f, 1.0f, 0.25f});
  Result<SampleAnalysis> a = analyzer.analyze(s, recipes({RecipeKind::kMxfp8, RecipeKind::kTensorCurrent}));
  REQUIRE(a.ok());
  REQUIRE(a.value().recipes.size() == 2);
  CHECK(a.value().recipes[0].caster == Caster::recipe(RecipeKind::kMxfp8));
  CHECK(a.value().recipes[1].caster == Caster::recipe(RecipeKind::kTensorCurrent));
  CHECK(a.value().te_amax == 2.0f);
  Result<SampleAnalysis> all = analyzer.analyze(s, SamplingPolicy{});
  REQUIRE(all.ok());
  REQUIRE(all.value().recipes.size() == std::size(kDefaultRecipeKinds));
  for (std::size_t i = 0; i < std::size(kDefaultRecipeKinds); ++i) {
    CHECK(all.value().recipes[i].caster == Caster::recipe(kDefaultRecipeKinds[i]));
  }
  Result<SampleAnalysis> asked = analyzer.analyze(s, recipes({RecipeKind::kMxfp8_2d}));
  REQUIRE(asked.ok());
  CHECK(asked.value().recipes.at(0).caster == Caster::recipe(RecipeKind::kMxfp8_2d));
}

TEST_CASE("current scaling maps the amax to the format's max: E4M3 forward, E5M2 for gradients", "[sample_analysis]") {
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  const SamplingPolicy current = recipes({RecipeKind::kTensorCurrent});
  const Result<SampleAnalysis> x = analyzer.analyze(f32_sample("l", 1, Operand::kX, {4.0f, -1.0f}), current);
  const Result<SampleAnalysis> dy = analyzer.analyze(f32_sample("l", 1, Operand::kDy, {4.0f, -1.0f}), current);
  REQUIRE(x.ok());
  REQUIRE(dy.ok());
  CHECK(x.value().recipes[0].format == CastFormat::kE4M3);
  CHECK(*x.value().recipes[0].scale == 448.0 / 4.0);
  CHECK(dy.value().recipes[0].format == CastFormat::kE5M2);
  CHECK(*dy.value().recipes[0].scale == 57344.0 / 4.0);
  CHECK(stat(x.value(), x.value().recipes[0], "amax") == 4.0);
}

TEST_CASE("delayed scaling takes this step's scale from the history before this step's amax joins it",
          "[sample_analysis]") {
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  const SamplingPolicy delayed = recipes({RecipeKind::kTensorDelayed});
  auto scale_at = [&](const std::string& layer, std::uint64_t step, float amax) {
    Result<SampleAnalysis> a = analyzer.analyze(f32_sample(layer, step, Operand::kX, {amax, 0.5f}), delayed);
    REQUIRE(a.ok());
    return *a.value().recipes[0].scale;
  };
  CHECK(scale_at("a", 1, 8.0f) == 1.0);         // TE starts at 1, the history all zero
  CHECK(scale_at("a", 2, 2.0f) == 448.0 / 8.0);  // max of the history: step 1's amax
  CHECK(scale_at("a", 3, 2.0f) == 448.0 / 8.0);  // 8 is still the history's largest
  CHECK(scale_at("b", 1, 2.0f) == 1.0);         // another tensor keeps its own history
}

TEST_CASE("a weight's current-scaling cast is fingerprinted for the inference check, an activation's not",
          "[sample_analysis]") {
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  const SamplingPolicy current = recipes({RecipeKind::kTensorCurrent});
  const Result<SampleAnalysis> w = analyzer.analyze(f32_sample("l", 1, Operand::kW, {1.0f, 3.0f}), current);
  const Result<SampleAnalysis> x = analyzer.analyze(f32_sample("l", 1, Operand::kX, {1.0f, 3.0f}), current);
  REQUIRE(w.ok());
  REQUIRE(x.ok());
  CHECK(w.value().recipes[0].codes_digest.size() == 16);
  CHECK(x.value().recipes[0].codes_digest.empty());
}

TEST_CASE("a job's own E4M3 codes are read with their scale: the observed recipe", "[sample_analysis]") {
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  // 0x7E is E4M3's 448, 0x38 is 1.0, 0x00 zero; scale_inv 0.5 halves them.
  const Sample s = e4m3_sample("l", 1, {0x7E, 0x38, 0x00, 0xB8}, 0.5f);
  const Result<SampleAnalysis> a = analyzer.analyze(s, recipes({RecipeKind::kTensorCurrent}));
  REQUIRE(a.ok());
  REQUIRE(a.value().recipes.size() == 1);
  const RecipeOutcome& o = a.value().recipes[0];
  CHECK(o.caster.is_job());
  CHECK(*o.scale == 2.0);  // 1 / scale_inv
  CHECK(stat(a.value(), o, "amax") == 224.0);
  CHECK(stat(a.value(), o, "saturation_ratio") == 0.25);  // one code of four at +-max
  CHECK(o.codes_digest.size() == 16);
}

TEST_CASE("an activation's outlier column and a weight's outlier row are found, persist, and a gradient has none",
          "[sample_analysis]") {
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16, OutlierChannelOptions{8.0, 2});
  std::vector<float> values(32, 1.0f);
  values[5] = -50.0f;  // column 5 of every row of a 4 x 32 X; of W's rows, row 0
  const SamplingPolicy current = recipes({RecipeKind::kTensorCurrent});
  const Result<SampleAnalysis> x = analyzer.analyze(f32_sample("l", 1, Operand::kX, values), current);
  REQUIRE(x.ok());
  CHECK(x.value().channels.channels == 32);
  CHECK(x.value().channels.amax_ratio() == 50.0);
  CHECK(x.value().channels.outliers == std::vector<std::uint32_t>{5});
  CHECK(x.value().channels.persistent == std::vector<std::uint32_t>{5});

  std::vector<float> w(4 * 32, 1.0f);
  w[40] = 9.0f;  // row 1
  const Result<SampleAnalysis> weight = analyzer.analyze(f32_sample("l", 1, Operand::kW, w), current);
  REQUIRE(weight.ok());
  CHECK(weight.value().channels.channels == 4);
  CHECK(weight.value().channels.outliers == std::vector<std::uint32_t>{1});

  const Result<SampleAnalysis> dy = analyzer.analyze(f32_sample("l", 1, Operand::kDy, values), current);
  REQUIRE(dy.ok());
  CHECK(dy.value().channels.channels == 0);

  // The same X with column 5 back in line: over the window of two, nothing persists; another
  // layer's X keeps a history of its own.
  const Result<SampleAnalysis> calm = analyzer.analyze(f32_sample("l", 2, Operand::kX, {1.0f}), current);
  REQUIRE(calm.ok());
  CHECK(calm.value().channels.outliers.empty());
  CHECK(calm.value().channels.persistent.empty());
  const Result<SampleAnalysis> other = analyzer.analyze(f32_sample("m", 2, Operand::kX, values), current);
  REQUIRE(other.ok());
  CHECK(other.value().channels.persistent == std::vector<std::uint32_t>{5});
}
