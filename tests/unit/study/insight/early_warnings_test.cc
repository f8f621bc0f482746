// Early warnings against hand-built runs: a channel ratio that grows step by step ahead of the
// onset leads by the steps from where it left its baseline; a warning that rose and fell back, a
// rise that begins after the onset, a noisy but flat series and a series too short to have a
// baseline do not warn; the kurtosis and the channel ratio read from any recipe's records.
#include "fp8scope/insight/early_warnings.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

using namespace fp8scope;
using namespace fp8scope::insight;

namespace {

// One tensor sampled every 2 steps from step 0 to 98, its `key` statistic given by value(step).
void add_tensor(RunRecords& run, const std::string& layer, const char* key, const std::function<double(int)>& value,
                Caster recipe = Caster::recipe(RecipeKind::kTensorCurrent)) {
  std::vector<RecordPoint>& series = run.tensors[TensorKey{layer, "fprop", "x"}].recipes[RecipeKey{recipe, &kE4M3}];
  const std::size_t index = studied_statistic_index(key).value();
  for (int step = 0; step < 100; step += 2) {
    RecordPoint p;
    p.step = static_cast<std::uint64_t>(step);
    p.statistics.fill(std::nan(""));
    p.statistics[index] = value(step);
    series.push_back(p);
  }
}

}  // namespace

TEST_CASE("a channel ratio that grows from step 60 leads an onset at 80 by 16 steps", "[early_warnings]") {
  RunRecords run;
  // 1.5 until step 60, then 1.2x a sample. A flat baseline's sigma is the floor, 0.05 in log10, so
  // 3 sigmas is 1.41x: sample 62 (1.2x) has not risen yet, sample 64 (1.44x) has.
  add_tensor(run, "blocks.0.fc1", "channel_amax_ratio",
             [](int step) { return step < 62 ? 1.5 : 1.5 * std::pow(1.2, (step - 60) / 2); });
  add_tensor(run, "blocks.1.fc1", "channel_amax_ratio", [](int step) { return 1.5 + 0.01 * (step % 3); });
  const std::vector<EarlyWarning> w = early_warnings(run, 80);
  REQUIRE(w.size() == 1);
  CHECK(w[0].tensor.layer == "blocks.0.fc1");
  CHECK(w[0].signal == "channel_amax_ratio");
  CHECK(w[0].baseline == Approx(1.5));
  CHECK(w[0].before_onset == Approx(1.5 * std::pow(1.2, 9)));  // step 78
  CHECK(w[0].first_step == 64);
  CHECK(w[0].steps_ahead == 16);
  CHECK(w[0].score > 3);
}

TEST_CASE("a rise that fell back, a rise after the onset, and a short series give no warning", "[early_warnings]") {
  RunRecords run;
  add_tensor(run, "fell_back", "kurtosis", [](int step) { return step >= 40 && step < 60 ? 30.0 : 3.0; });
  add_tensor(run, "after", "kurtosis", [](int step) { return step >= 80 ? 30.0 : 3.0; });
  CHECK(early_warnings(run, 80).empty());
  // Kurtosis that rose at step 76 warns by its last two samples (76 and 78), four steps ahead.
  add_tensor(run, "late", "kurtosis", [](int step) { return step >= 76 ? 30.0 : 3.0; });
  const std::vector<EarlyWarning> w = early_warnings(run, 80);
  REQUIRE(w.size() == 1);
  CHECK(w[0].tensor.layer == "late");
  CHECK(w[0].steps_ahead == 4);
  // Nine samples before step 18: fewer than a baseline and a run of two.
  CHECK(early_warnings(run, 18).empty());
}

TEST_CASE("persistent outlier channels warn from the first sample that had one, longest lead first", "[early_warnings]") {
  RunRecords run;
  add_tensor(run, "blocks.2.fc2", "persistent_outlier_channels", [](int step) { return step >= 50 ? 2.0 : 0.0; },
             Caster::recipe(RecipeKind::kMxfp8));
  add_tensor(run, "blocks.3.fc2", "kurtosis", [](int step) { return step >= 70 ? 12.0 : 3.0; });
  const std::vector<EarlyWarning> w = early_warnings(run, 90);
  REQUIRE(w.size() == 2);
  CHECK(w[0].signal == "persistent_outlier_channels");
  CHECK(w[0].steps_ahead == 40);
  CHECK(w[1].signal == "kurtosis");
  CHECK(w[1].steps_ahead == 20);
}
