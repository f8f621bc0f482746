// A mixture-of-experts layer put back together from its experts' records: the experts whose
// underflow is 4x the layer's median are named worst first in one sentence, a layer whose experts
// agree names none, a layer where most experts underflow nothing names those that do, each expert
// name survives the round trip through its tensor name, and the grids hold every expert and step
// (NaN where an expert had no tokens), the outliers' layers first.
#include <catch2/catch.hpp>
#include <cmath>

#include "fp8scope/insight/advice.h"
#include "fp8scope/insight/advice_formats.h"
#include "fp8scope/insight/expert_summary.h"

using namespace fp8scope;
using namespace fp8scope::insight;

namespace {

RecordPoint point(std::uint64_t step, double underflow, double mse = 1e-4) {
  RecordPoint p;
  p.step = step;
  p.statistics.fill(std::nan(""));
  p.statistics[StudiedStatistic("underflow_ratio").index] = underflow;
  p.statistics[StudiedStatistic("mse").index] = mse;
  return p;
}

// One MoE layer's fprop X, expert e underflowing underflow(e) at each of `steps` steps; an expert
// listed in `idle_at` has no point at that step.
void add_layer(RunRecords& run, const std::string& layer, int experts, double (*underflow)(int), std::uint64_t steps,
               std::pair<int, std::uint64_t> idle_at = {-1, 0}) {
  for (int e = 0; e < experts; ++e) {
    TensorRecords& t = run.tensors[TensorKey{expert_layer_name(layer, e), "fprop", "x"}];
    auto& points = t.recipes[RecipeKey{Caster::recipe(RecipeKind::kTensorCurrent), &kE4M3}];
    for (std::uint64_t s = 0; s < steps; ++s) {
      if (idle_at.first == e && idle_at.second == s) continue;
      points.push_back(point(s * 10, underflow(e)));
    }
  }
}

}  // namespace

TEST_CASE("an expert's tensor name splits back into its layer and expert", "[experts]") {
  const auto split = split_expert_layer(expert_layer_name("layers.12.mlp.experts#0", 17));
  REQUIRE(split);
  CHECK(split->first == "layers.12.mlp.experts#0");
  CHECK(split->second == 17);
  CHECK_FALSE(split_expert_layer("layers.12.mlp.fc1#0"));
  CHECK_FALSE(split_expert_layer("a/expert"));
  CHECK_FALSE(split_expert_layer("a/expertx3"));
}

TEST_CASE("experts at 4x their layer's median are named worst first, and agreeing experts are not", "[experts]") {
  RunRecords run;
  run.run = "moe";
  add_layer(run, "layers.12.mlp", 8, [](int e) { return e == 3 ? 0.08 : e == 17 % 8 ? 0.05 : 0.01 + 0.0001 * e; }, 5);
  add_layer(run, "layers.3.mlp", 8, [](int e) { return 0.02 + 0.001 * e; }, 5);
  const std::vector<ExpertOutlier> outliers = expert_outliers(run);
  REQUIRE(outliers.size() == 1);
  const ExpertOutlier& o = outliers.front();
  CHECK(o.tensor == TensorKey{"layers.12.mlp", "fprop", "x"});
  CHECK(o.statistic == "underflow_ratio");
  CHECK(o.experts == std::vector<std::int64_t>{3, 1});
  CHECK(o.experts_in_layer == 8);
  CHECK(o.median == Approx((0.0105 + 0.0106) / 2));  // the middle two of the eight
  CHECK(o.factor == Approx(0.08 / o.median));
  CHECK(o.sentence.rfind("experts 3 and 1 of layers.12.mlp fprop x underflow 7.", 0) == 0);
  CHECK(o.sentence.find("x the layer's median (0.08 against 0.01") != std::string::npos);
  CHECK(o.sentence.find(", 8 experts, tensor_current)") != std::string::npos);
}

TEST_CASE("where most experts underflow nothing, those that do are named, and tiny values are not", "[experts]") {
  RunRecords run;
  add_layer(run, "moe.a", 6, [](int e) { return e == 5 ? 0.2 : 0.0; }, 3);
  add_layer(run, "moe.b", 6, [](int e) { return e == 5 ? 1e-6 : 0.0; }, 3);  // below the floor
  const std::vector<ExpertOutlier> outliers = expert_outliers(run);
  REQUIRE(outliers.size() == 1);
  CHECK(outliers[0].tensor.layer == "moe.a");
  CHECK(std::isinf(outliers[0].factor));
  CHECK(outliers[0].sentence.find("expert 5 of moe.a fprop x underflow where the layer's median is 0") == 0);
}

TEST_CASE("the grids hold every expert and step, outliers' layers first, NaN where an expert was idle", "[experts]") {
  RunRecords run;
  add_layer(run, "moe.quiet", 4, [](int e) { return 0.001 * (e + 1); }, 4, {2, 1});
  add_layer(run, "moe.loud", 4, [](int e) { return e == 0 ? 0.5 : 0.01; }, 4);
  add_layer(run, "moe.worst_median", 4, [](int) { return 0.3; }, 4);
  const std::vector<ExpertOutlier> outliers = expert_outliers(run);
  REQUIRE(outliers.size() == 1);
  const std::vector<ExpertGrid> grids = expert_grids(run, outliers);
  REQUIRE(grids.size() == 3);
  CHECK(grids[0].tensor.layer == "moe.loud");          // the outlier's
  CHECK(grids[1].tensor.layer == "moe.worst_median");  // then by the worst expert's underflow
  CHECK(grids[2].tensor.layer == "moe.quiet");
  const ExpertGrid& quiet = grids[2];
  CHECK(quiet.experts == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(quiet.steps == std::vector<std::uint64_t>{0, 10, 20, 30});
  CHECK(std::isnan(quiet.values[2][1]));
  CHECK(quiet.values[3][1] == 0.004);
  ExpertSummaryOptions one;
  one.max_grids = 1;
  CHECK(expert_grids(run, outliers, one).size() == 1);
}

TEST_CASE("advise carries the outliers into its table and JSON, and dense runs have none", "[experts]") {
  RunRecords run;
  run.run = "moe";
  add_layer(run, "moe.loud", 4, [](int e) { return e == 0 ? 0.5 : 0.01; }, 4);
  const RunAdvice advice = advise(run, {});
  REQUIRE(advice.experts.size() == 1);
  std::ostringstream table;
  write_advice_table(advice, table);
  CHECK(table.str().find("experts that depart from their layer's others:\n  expert 0 of moe.loud fprop x underflow 50x") !=
        std::string::npos);
  CHECK(advice_json(advice).find("\"experts\":[{\"experts\":[0]") != std::string::npos);
  RunRecords dense;
  dense.run = "dense";
  dense.tensors[TensorKey{"fc1", "fprop", "x"}]
      .recipes[RecipeKey{Caster::recipe(RecipeKind::kTensorCurrent), &kE4M3}]
      .push_back(point(0, 0.5));
  CHECK(advise(dense, {}).experts.empty());
}
