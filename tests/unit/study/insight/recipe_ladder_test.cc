// The recipe ladder on what-ifs the real CPU engine computes: a GEMM of unit Gaussians takes
// NVFP4; one whose X spans 12 binades inside every block loses NVFP4 (underflow) but holds in
// MXFP8; one whose X spans 40 binades holds in nothing and stays in BF16. A GEMM takes a rung only
// when every operand holds there, an operand not sampled under a recipe keeps its GEMM off that
// rung, and the FP4 share counts the GEMMs on the first rung.
#include "fp8scope/insight/recipe_ladder.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"

using namespace fp8scope;
using namespace fp8scope::insight;

namespace {

// One sampled step of the tensor under each recipe named, as the history would hold it.
TensorRecords what_ifs(const std::vector<float>& data, Operand operand, std::vector<RecipeKind> recipes) {
  auto engine = make_cpu_engine(1);
  TensorRecords t;
  for (const RecipeKind kind : recipes) {
    const Recipe recipe = default_recipe(kind);
    const CastFormat format = recipe.format_for(operand);
    const QuantSpec spec = quant_spec_for(recipe, format, operand, {}).value();
    TensorAnalysis a;
    REQUIRE(engine->analyze(TensorView{data.data(), DType::kF32, 128, 128, 1.0f}, {&spec, 1}, &a).ok());
    RecordPoint p;
    for (std::size_t i = 0; i < kStudiedStatisticCount; ++i) {
      p.statistics[i] = find_statistic(kStudiedStatistics[i])->value(a.moments, a.quant[0], ChannelSummary{});
    }
    t.recipes[RecipeKey{Caster::recipe(kind), &format_row(format)}] = {p};
  }
  return t;
}

std::vector<float> gaussian(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(128 * 128);
  for (float& x : v) x = normal(rng);
  return v;
}

// Magnitudes 2^U(-binades, 0) with random signs: every block spans about `binades` binades.
std::vector<float> log_uniform(double binades, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> e(-binades, 0.0);
  std::vector<float> v(128 * 128);
  for (float& x : v) x = static_cast<float>((rng() % 2 ? 1.0 : -1.0) * std::exp2(e(rng)));
  return v;
}

const std::vector<RecipeKind> kAll = {RecipeKind::kNvfp4, RecipeKind::kMxfp8, RecipeKind::kTensorCurrent};

}  // namespace

TEST_CASE("each GEMM takes the first recipe that holds every operand, and a third of these are ready for FP4",
          "[recipe_ladder]") {
  RunRecords run;
  run.tensors[{"gauss", "fprop", "x"}] = what_ifs(gaussian(1), Operand::kX, kAll);
  run.tensors[{"gauss", "fprop", "w"}] = what_ifs(gaussian(2), Operand::kW, kAll);
  run.tensors[{"wide", "fprop", "x"}] = what_ifs(log_uniform(12, 3), Operand::kX, kAll);
  run.tensors[{"wide", "fprop", "w"}] = what_ifs(gaussian(4), Operand::kW, kAll);
  run.tensors[{"vast", "fprop", "x"}] = what_ifs(log_uniform(40, 5), Operand::kX, kAll);
  run.tensors[{"vast", "fprop", "w"}] = what_ifs(gaussian(6), Operand::kW, kAll);
  const RecipeLadder ladder = recipe_ladder(run);
  REQUIRE(ladder.gemms.size() == 3);
  std::map<std::string, const GemmRecipe*> by_layer;
  for (const GemmRecipe& g : ladder.gemms) by_layer[g.layer] = &g;
  INFO(by_layer["wide"]->evidence << " | " << by_layer["vast"]->evidence);
  CHECK(by_layer["gauss"]->recipe == RecipeKind::kNvfp4);
  CHECK(by_layer["wide"]->recipe == RecipeKind::kMxfp8);
  CHECK(by_layer["vast"]->recipe == std::nullopt);
  CHECK(by_layer["wide"]->evidence.find("not nvfp4: x reaches the level of concern in underflow_ratio") !=
        std::string::npos);
  CHECK(by_layer["gauss"]->evidence.rfind("nvfp4 holds every operand (", 0) == 0);
  CHECK(ladder.fp4_ready == 1);
  CHECK(ladder.fp4_share() == Approx(1.0 / 3.0));
  // The wide X's own rungs: NVFP4 fails it on underflow, MXFP8 holds it.
  for (const OperandRungs& o : by_layer["wide"]->operands) {
    if (o.operand != "x") continue;
    REQUIRE(o.rungs.size() == 3);
    CHECK_FALSE(o.rungs[0].holds);
    CHECK(o.rungs[0].failed_on == "underflow_ratio");
    CHECK(o.rungs[1].holds);
  }
}

TEST_CASE("an operand not sampled under a recipe keeps its GEMM off that rung, and a run without what-ifs has no ladder",
          "[recipe_ladder]") {
  RunRecords run;
  run.tensors[{"l", "wgrad", "x"}] = what_ifs(gaussian(7), Operand::kX, kAll);
  run.tensors[{"l", "wgrad", "dy"}] = what_ifs(gaussian(8), Operand::kDy, {RecipeKind::kMxfp8, RecipeKind::kTensorCurrent});
  const RecipeLadder ladder = recipe_ladder(run);
  REQUIRE(ladder.gemms.size() == 1);
  CHECK(ladder.gemms[0].recipe == RecipeKind::kMxfp8);
  CHECK(ladder.gemms[0].evidence.find("not nvfp4: dy was not sampled under it") != std::string::npos);
  CHECK(ladder.fp4_ready == 0);

  RunRecords codes_only;
  codes_only.tensors[{"l", "fprop", "x"}].recipes[RecipeKey{Caster::job(), &kE4M3}] = {RecordPoint{}};
  CHECK(recipe_ladder(codes_only).gemms.empty());
  // ...unless the baseline captured the same tensor in high precision.
  CHECK(recipe_ladder(codes_only, &run).gemms.empty());  // the baseline has no fprop x
  RunRecords baseline;
  baseline.tensors[{"l", "fprop", "x"}] = what_ifs(gaussian(9), Operand::kX, kAll);
  const RecipeLadder from_baseline = recipe_ladder(codes_only, &baseline);
  REQUIRE(from_baseline.gemms.size() == 1);
  CHECK(from_baseline.gemms[0].recipe == RecipeKind::kNvfp4);
}
