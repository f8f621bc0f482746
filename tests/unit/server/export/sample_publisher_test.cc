// Where an analyzed sample goes: the tensor's and each exported recipe's series (labelled job,
// layer, gemm, operand, and format and recipe per recipe), the tensor table with every recipe,
// one history record per recipe whatever is exported, and a job's scalars and GEMM checks as
// history records of their own.
#include "fp8scope/export/sample_publisher.h"

#include <catch2/catch.hpp>
#include <prometheus/registry.h>

#include <cmath>

#include "fp8scope/analysis/sample_analysis.h"
#include "fp8scope/kernels/cpu_engine.h"
#include "support/server_samples.h"
#include "support/stored_records.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {

// The value of one series of the registry, or NaN when there is none with these labels.
double series_value(prometheus::Registry& registry, const std::string& name, const prometheus::Labels& labels) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::size_t matched = 0;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        const auto it = labels.find(l.name);
        matched += it != labels.end() && it->second == l.value;
      }
      if (matched == labels.size()) return m.gauge.value;
    }
  }
  return std::nan("");
}

struct Stages {
  fp8scope::testing::TempDir dir;
  prometheus::Registry registry;
  TensorSeries series{registry, SeriesOptions{}};
  TensorTable tensors{100};
  std::unique_ptr<history::HistoryStore> history = std::move(history::HistoryStore::open(dir.path(), {"test"})).value();
  SamplePublisher publisher{series, tensors, *history, MetricExport{{RecipeKind::kTensorCurrent}, false}};

  std::vector<history::HistoryRecord> records() { return fp8scope::testing::stored_records(*history); }
};

}  // namespace

TEST_CASE("a sample's statistics reach its series, the tensor table and the history", "[sample_publisher]") {
  Stages st;
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  const Sample s = fp8scope::testing::f32_sample("blocks.0.fc1", 7, Operand::kX, {3.0f, -0.5f, 1.0f, 1e-9f});
  SamplingPolicy policy;
  policy.recipes = {RecipeKind::kTensorCurrent, RecipeKind::kMxfp8};
  const SampleAnalysis a = analyzer.analyze(s, policy).value();
  st.publisher.publish(s, a);

  const prometheus::Labels tensor{{"job", "job"}, {"layer", "blocks.0.fc1"}, {"gemm", "fprop"}, {"operand", "x"}};
  CHECK(series_value(st.registry, "fp8scope_amax", tensor) == 3.0);
  CHECK(series_value(st.registry, "fp8scope_last_step", tensor) == 7.0);
  prometheus::Labels current = tensor;
  current["recipe"] = "tensor_current";
  current["format"] = "e4m3";
  const double underflow = find_statistic("underflow_ratio")->compute(a.moments, a.recipes[0].stats);
  CHECK(series_value(st.registry, "fp8scope_underflow_ratio", current) == underflow);
  CHECK(series_value(st.registry, "fp8scope_scale", current) == static_cast<double>(448.0f / 3.0f));
  prometheus::Labels mxfp8 = tensor;
  mxfp8["recipe"] = "mxfp8";
  mxfp8["format"] = "e4m3";
  CHECK(std::isnan(series_value(st.registry, "fp8scope_underflow_ratio", mxfp8)));  // not an exported recipe

  const auto listed = st.tensors.list("", 0, std::nullopt).value();
  REQUIRE(listed.tensors.size() == 1);
  const TensorSummary& t = listed.tensors[0];
  CHECK(t.layer == "blocks.0.fc1");
  CHECK(t.rank == 3);
  CHECK(t.step == 7);
  REQUIRE(t.recipes.size() == 2);
  CHECK(t.recipes[0].statistic("underflow_ratio") == underflow);
  CHECK(t.recipes[1].caster == Caster::recipe(RecipeKind::kMxfp8));

  const std::vector<history::HistoryRecord> rows = st.records();
  REQUIRE(rows.size() == 2);  // one per recipe, exported or not
  CHECK(rows[0].caster == Caster::recipe(RecipeKind::kTensorCurrent));
  CHECK(rows[0].host == "node-a");
  CHECK(rows[0].rank == 3);
  CHECK(rows[0].step == 7);
  CHECK(rows[0].numel == 128);
  CHECK(rows[0].scale == static_cast<double>(448.0f / 3.0f));
  CHECK(rows[0].scale_current == static_cast<double>(448.0f / 3.0f));
  CHECK(rows[0].histogram.size() == static_cast<std::size_t>(kHistogramBins));
  CHECK(rows[1].caster == Caster::recipe(RecipeKind::kMxfp8));
}

TEST_CASE("scalars and GEMM checks become history records of their own", "[sample_publisher]") {
  Stages st;
  st.publisher.publish_scalar(ScalarMark{fp8scope::testing::client(), 12.5, 40, "loss", 2.25});
  GemmPair pair;
  pair.client = fp8scope::testing::client();
  pair.layer = "blocks.1.fc2";
  pair.step = 41;
  GemmCheckResult r;
  r.accumulate = "emulated";
  r.rows = 4;
  r.n = 8;
  r.mse = 1e-4;
  r.cosine = 0.999;
  r.max_rel_error = 0.01;
  st.publisher.publish_gemm_check(pair, {r});
  REQUIRE(st.history->flush().ok());
  std::vector<history::ScalarRecord> scalars;
  REQUIRE(st.history->reader().query_scalars("", "", [&](const history::ScalarRecord& s) {
    scalars.push_back(s);
    return true;
  }).ok());
  REQUIRE(scalars.size() == 1);
  CHECK(scalars[0].time == 12.5);
  CHECK(scalars[0].step == 40);
  CHECK(scalars[0].name == "loss");
  CHECK(scalars[0].value == 2.25);
  CHECK(scalars[0].host == "node-a");
  std::vector<history::GemmOutputRecord> outputs;
  REQUIRE(st.history->reader().query_gemm_outputs("", [&](const history::GemmOutputRecord& g) {
    outputs.push_back(g);
    return true;
  }).ok());
  REQUIRE(outputs.size() == 1);
  CHECK(outputs[0].layer == "blocks.1.fc2");
  CHECK(outputs[0].numel == 32);
  CHECK(outputs[0].mse == 1e-4);
  const prometheus::Labels labels{{"job", "job"}, {"layer", "blocks.1.fc2"}, {"accumulate", "emulated"}};
  CHECK(series_value(st.registry, "fp8scope_gemm_output_cosine_similarity", labels) == 0.999);
}
