// What a sample of one of many experts (or ranks) costs the daemon's metric series: the statistic
// series a mixture-of-experts sample sets (MSE, cosine, underflow of each of the seven default
// recipes, and the layer's nonfinite ratio: 22 series) and, for an expert, each series' worst
// expert and median (fp8scope_expert_worst, fp8scope_expert_median), with every expert (rank)
// already a member. Counter "x_one": the time a sample against a layer of one expert (one rank)
// in the same run; a cost per member grows it with the count (before the ordered views: 4,096
// experts 105x, 4,096 ranks 74x; after: 1.6x and 1.3x).
#include <benchmark/benchmark.h>
#include <prometheus/registry.h>

#include <map>
#include <string>
#include <vector>

#include "fp8scope/export/metrics_table.h"
#include "fp8scope/export/tensor_series.h"
#include "fp8scope/vocabulary/recipe_kind.h"
#include "median_reporter.h"

namespace {

using fp8scope::server::MetricDef;
using fp8scope::server::SeriesMember;
using fp8scope::server::TensorSeries;

struct Layer {
  prometheus::Registry registry;
  TensorSeries series{registry, fp8scope::server::SeriesOptions{}};
  std::vector<std::pair<const MetricDef*, prometheus::Labels>> keys;

  Layer() {
    const prometheus::Labels tensor{{"job", "bench"}, {"layer", "blocks.0.mlp.experts#0"}, {"gemm", "fprop"},
                                    {"operand", "x"}};
    keys.emplace_back(fp8scope::server::find_metric("fp8scope_nonfinite_ratio"), tensor);
    for (const fp8scope::RecipeKind kind : fp8scope::kDefaultRecipeKinds) {
      prometheus::Labels l = tensor;
      l["format"] = "e4m3";
      l["recipe"] = fp8scope::recipe_name(kind);
      for (const char* m : {"fp8scope_mse", "fp8scope_cosine_similarity", "fp8scope_underflow_ratio"}) {
        keys.emplace_back(fp8scope::server::find_metric(m), l);
      }
    }
  }
  // One sample of `member`: every series set, and for an expert each one's spread.
  void sample(SeriesMember member, double value) {
    for (const auto& [metric, labels] : keys) {
      series.set(*metric, labels, member, value);
      if (member.expert >= 0) benchmark::DoNotOptimize(series.expert_spread(*metric, labels));
    }
  }
};

void samples(benchmark::State& state, bool experts) {
  const auto members = static_cast<std::uint32_t>(state.range(0));
  Layer layer;
  const auto member = [&](std::uint32_t i) {
    return experts ? SeriesMember{0, static_cast<std::int64_t>(i)} : SeriesMember{i, -1};
  };
  for (std::uint32_t i = 0; i < members; ++i) layer.sample(member(i), 1e-3 * i);
  std::uint32_t next = 0;
  for (auto _ : state) {
    layer.sample(member(next), 1e-3 * (next * 7 % 1000));
    next = next + 1 == members ? 0 : next + 1;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_ExpertSample(benchmark::State& state) { samples(state, true); }
void BM_RankSample(benchmark::State& state) { samples(state, false); }

std::map<std::string, double> g_one;  // "BM_ExpertSample", "BM_RankSample": a layer of one member

void against_one(const std::string& name, double seconds, benchmark::UserCounters& counters) {
  const std::string family = name.substr(0, name.find('/'));
  if (name.find("/1/") != std::string::npos || name.ends_with("/1")) g_one[family] = seconds;
  if (g_one.count(family)) counters["x_one"] = seconds / g_one[family];
}

BENCHMARK(BM_ExpertSample)->Arg(1)->Arg(256)->Arg(4096)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_RankSample)->Arg(1)->Arg(256)->Arg(4096)->Repetitions(3)->ReportAggregatesOnly(true);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  fp8scope::bench::MedianReporter reporter(against_one);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
