// Attribution, amax replay, advice and its formats on hand-made records whose answer is known:
// a tensor whose overflow jumps at the onset is named first; a replay of a slowly growing amax
// finds the margin that stops the clipping; thresholds map to the recommendation the README
// promises; the TE YAML parses into the sections it should, the Megatron list counts from the ends.
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "advice.h"
#include "advice_formats.h"
#include "amax_replay.h"
#include "attribution.h"
#include "fp8scope/statistics_table.h"
#include "inference_check.h"

using namespace fp8scope;
using namespace fp8scope::insight;

namespace {

RecordPoint point(std::uint64_t step, std::initializer_list<std::pair<const char*, double>> stats, double scale = 1.0,
                  double scale_current = 1.0) {
  RecordPoint p;
  p.step = step;
  p.scale = scale;
  p.scale_current = scale_current;
  p.statistics.assign(statistics().size(), std::nan(""));
  for (const auto& [key, value] : stats) {
    const Statistic* s = find_statistic(key);
    REQUIRE(s != nullptr);
    p.statistics[static_cast<std::size_t>(s - statistics().data())] = value;
  }
  return p;
}

// A healthy tensor: tiny underflow, no overflow, E4M3-like error, steady amax.
std::vector<RecordPoint> healthy(std::uint64_t steps, double wobble = 0.0) {
  std::vector<RecordPoint> v;
  for (std::uint64_t t = 0; t < steps; ++t) {
    const double w = wobble * std::sin(static_cast<double>(t));
    v.push_back(point(t, {{"underflow_ratio", 1e-5 * (1 + w)}, {"overflow_ratio", 0}, {"saturation_ratio", 1e-4},
                          {"mse", 1e-4 * (1 + w)}, {"cosine", 0.9997}, {"sqnr_db", 31.0}, {"amax", 4.0 * (1 + 0.01 * w)},
                          {"dynamic_range_log2", 12}},
                      100.0, 112.0));
  }
  return v;
}

RunRecords run_of(std::initializer_list<std::pair<TensorKey, TensorRecords>> tensors) {
  RunRecords r;
  r.run = "fp8";
  for (const auto& [k, t] : tensors) r.tensors[k] = t;
  return r;
}

TensorRecords with(std::initializer_list<std::pair<RecipeKey, std::vector<RecordPoint>>> recipes) {
  TensorRecords t;
  for (const auto& [k, v] : recipes) t.recipes[k] = v;
  return t;
}

const RecipeKey kCurrent{"tensor_current", "e4m3"}, kDelayed{"tensor_delayed", "e4m3"};

}  // namespace

TEST_CASE("attribution names the tensor whose overflow jumps at the onset, with its numbers", "[attribution]") {
  std::vector<RecordPoint> jumping = healthy(60, 0.3);
  jumping[40] = point(40, {{"overflow_ratio", 0.02}, {"underflow_ratio", 1e-5}}, 100.0, 0.5);
  const RunRecords run = run_of({{{"a", "fprop", "x"}, with({{kDelayed, healthy(60, 0.3)}})},
                                 {{"b", "fprop", "x"}, with({{kDelayed, jumping}})},
                                 {{"c", "fprop", "x"}, with({{kDelayed, healthy(60, 0.5)}})}});
  const Attribution a = attribute(run, 40, "spike");
  REQUIRE(a.suspects.size() == 3);
  CHECK(a.suspects[0].tensor.layer == "b");
  CHECK(a.suspects[0].at_step == 40);
  // 2% overflow over a noise floor of 1e-4 (200 sigmas) outscores its scale lag (7.6 binades over 0.25).
  CHECK(a.suspects[0].signal == "overflow_ratio");
  CHECK(a.suspects[0].before == 0.0);
  CHECK(a.suspects[0].at == 0.02);
  CHECK(a.suspects[0].score == Approx(200.0));
  CHECK(a.suspects[0].score > 10 * std::max(1.0, a.suspects[1].score));
  // Nothing sampled before the onset: nothing to attribute.
  CHECK(attribute(run, 0, "spike").suspects.empty());
}

TEST_CASE("the amax replay counts clipped steps and headroom as TE's delayed rule would", "[amax_replay]") {
  // amax grows 10% a step: margin 0 clips every step after the first, margin 1 never (1.1 < 2).
  std::vector<AmaxPoint> growing;
  for (std::uint64_t t = 0; t < 50; ++t) growing.push_back({t, std::pow(1.1, static_cast<double>(t))});
  const ReplayOutcome m0 = replay_delayed(growing, CastFormat::kE4M3, 16, 0);
  CHECK(m0.steps == 49);
  CHECK(m0.clipped_steps == 49);
  CHECK(m0.worst_clip_log2 == Approx(std::log2(1.1)));
  const ReplayOutcome m1 = replay_delayed(growing, CastFormat::kE4M3, 16, 1);
  CHECK(m1.clipped_steps == 0);
  CHECK(m1.mean_headroom_log2 == Approx(1.0 - std::log2(1.1)));
  const auto s = suggest_delayed_scaling(growing, CastFormat::kE4M3, 1);
  REQUIRE(s);
  CHECK(s->te_default.clipped_steps == 49);
  CHECK(s->best.clipped_steps == 0);
  CHECK(s->best.margin == 1);
  // A spike of 100x then back: a long history holds the spike and wastes headroom, a short one
  // forgets it; neither can foresee the spike itself.
  std::vector<AmaxPoint> spike;
  for (std::uint64_t t = 0; t < 40; ++t) spike.push_back({t, t == 10 ? 100.0 : 1.0});
  const ReplayOutcome long_history = replay_delayed(spike, CastFormat::kE4M3, 1024, 0);
  const ReplayOutcome short_history = replay_delayed(spike, CastFormat::kE4M3, 4, 0);
  CHECK(long_history.clipped_steps == 1);
  CHECK(short_history.clipped_steps == 1);
  CHECK(long_history.mean_headroom_log2 > 5 * short_history.mean_headroom_log2);
  // Sampled every 8 steps, shorter histories than that are not candidates.
  std::vector<AmaxPoint> sparse;
  for (std::uint64_t t = 0; t < 400; t += 8) sparse.push_back({t, 1.0 + 0.01 * static_cast<double>(t % 3)});
  const auto sparse_s = suggest_delayed_scaling(sparse, CastFormat::kE4M3, 8);
  REQUIRE(sparse_s);
  CHECK(sparse_s->best.history_len >= 8);
  CHECK_FALSE(suggest_delayed_scaling({{0, 1.0}}, CastFormat::kE4M3, 1));
}

TEST_CASE("advice: thresholds lead to the recommendation the README promises", "[advice]") {
  std::vector<RecordPoint> lossy = healthy(30);
  for (RecordPoint& p : lossy) p = point(p.step, {{"underflow_ratio", 0.03}, {"sqnr_db", 25.0}, {"amax", 4.0}});
  std::vector<RecordPoint> lagging = healthy(30);
  for (std::size_t i = 0; i < lagging.size(); i += 2) lagging[i].scale = 2 * lagging[i].scale_current;
  // The job's E4M3 gradient codes fill the format's whole span (17.8 binades).
  std::vector<RecordPoint> e4m3_dy = healthy(30);
  for (RecordPoint& p : e4m3_dy) p = point(p.step, {{"dynamic_range_log2", 17.8}, {"amax", 1e-3}});
  // Another job's E4M3 gradient that a BF16 capture shows spanning 12 binades: E4M3 holds it.
  std::vector<RecordPoint> narrow_bf16_dy = healthy(30);
  for (RecordPoint& p : narrow_bf16_dy) p = point(p.step, {{"dynamic_range_log2", 12.0}, {"amax", 1e-3}});
  const RunRecords run = run_of({
      {{"blocks.0.attn", "fprop", "x"}, with({{kCurrent, healthy(30)}, {kDelayed, healthy(30)}})},
      {{"blocks.1.mlp", "fprop", "x"}, with({{kCurrent, lossy}, {kDelayed, lossy}})},
      {{"blocks.1.mlp", "fprop", "w"}, with({{kCurrent, lossy}, {kDelayed, lossy}})},
      {{"blocks.2.mlp", "wgrad", "x"}, with({{kCurrent, healthy(30)}, {kDelayed, lagging}})},
      {{"blocks.3.mlp", "dgrad", "dy"}, with({{{"observed", "e4m3"}, e4m3_dy}})},
      {{"blocks.3.mlp", "wgrad", "dy"}, with({{{"observed", "e4m3"}, e4m3_dy}, {kCurrent, narrow_bf16_dy}})},
      {{"blocks.3.mlp", "fprop", "y"}, with({{{"gemm_emulated", "e4m3"}, healthy(30)}})},
  });
  const RunAdvice advice = advise(run, {});
  REQUIRE(advice.tensors.size() == 6);  // the GEMM output record is no tensor the job casts
  std::map<std::string, const TensorAdvice*> by;
  for (const TensorAdvice& t : advice.tensors) by[t.tensor.name()] = &t;
  CHECK(by["blocks.0.attn fprop x"]->recommendation == Recommendation::kKeepFp8);
  CHECK(by["blocks.0.attn fprop x"]->risk < 0.5);
  CHECK(by["blocks.1.mlp fprop x"]->recommendation == Recommendation::kFallBackToBf16);
  CHECK(by["blocks.1.mlp fprop x"]->risk == 1.0);
  CHECK(by["blocks.1.mlp fprop x"]->driver == "underflow_ratio");
  CHECK(by["blocks.2.mlp wgrad x"]->recommendation == Recommendation::kCurrentScaling);
  CHECK(by["blocks.2.mlp wgrad x"]->lagging_share == Approx(0.5));
  CHECK(by["blocks.3.mlp dgrad dy"]->recommendation == Recommendation::kE5m2ForDy);
  CHECK(by["blocks.3.mlp wgrad dy"]->recommendation != Recommendation::kE5m2ForDy);
  CHECK(advice.tensors.back().risk <= advice.tensors.front().risk);

  SECTION("the TE debug-API YAML: one DisableFP8Layer section, one PerTensorScaling, recipe notes as comments") {
    std::ostringstream yaml;
    write_te_debug_yaml(advice, yaml);
    const std::string y = yaml.str();
    CHECK_THAT(y, Catch::Contains("layer_name_regex_pattern: '^(blocks\\.1\\.mlp)$'\n  transformer_engine:\n"
                                  "    DisableFP8Layer:\n      enabled: True\n"));
    CHECK_THAT(y, Catch::Contains("layer_name_regex_pattern: '^(blocks\\.2\\.mlp)$'\n  transformer_engine:\n"
                                  "    PerTensorScaling:\n      enabled: True\n      gemms_struct:\n"
                                  "        - gemm: wgrad\n          tensors: [activation]\n"));
    CHECK_THAT(y, Catch::Contains("#   blocks.3.mlp dgrad dy: E5M2 for Dy"));
  }
  SECTION("the Megatron list: layer 1 in BF16 is neither first nor last") {
    std::ostringstream m;
    write_megatron_layers(advice, m);
    CHECK_THAT(m.str(), Catch::Contains("bf16_layers: [1]\n"));
    CHECK_THAT(m.str(), Catch::Contains("cannot express this list"));
  }
}

TEST_CASE("module names and layer numbers come out of fp8scope's labels", "[advice]") {
  CHECK(module_name("decoder.layers.11.mlp.fc1#0") == "decoder.layers.11.mlp.fc1");
  CHECK(module_name("gemm#3") == "gemm");
  CHECK(transformer_layer_index("decoder.layers.11.mlp.fc1") == 11);
  CHECK(transformer_layer_index("h.0.attn") == 0);
  CHECK(transformer_layer_index("lm_head") == -1);
}

TEST_CASE("inference check: scale, codes and format against training's last capture", "[inference_check]") {
  auto weight = [](std::uint64_t step, double scale, const char* digest) {
    RecordPoint p = point(step, {{"amax", 1.0}}, scale, scale);
    p.codes_digest = digest;
    return p;
  };
  const RecipeKey observed{"observed", "e4m3"};
  RunRecords training = run_of({
      {{"a", "fprop", "w"}, with({{kCurrent, {weight(1, 100.0, "01"), weight(9, 448.0, "aa")}}})},
      {{"b", "fprop", "w"}, with({{observed, {weight(9, 64.0, "bb")}}})},
      {{"c", "fprop", "w"}, with({{kCurrent, {weight(9, 2.0, "cc")}}})},
      {{"d", "fprop", "w"}, with({{{"observed", "e5m2"}, {weight(9, 2.0, "dd")}}})},
  });
  training.run = "train";
  RunRecords inference = run_of({
      {{"a", "fprop", "w"}, with({{observed, {weight(3, 448.0 * (1 + 1e-7), "aa")}}})},
      {{"b", "fprop", "w"}, with({{observed, {weight(3, 64.0, "b0")}}})},
      {{"c", "fprop", "w"}, with({{observed, {weight(3, 4.0, "cc")}}})},
      {{"d", "fprop", "w"}, with({{observed, {weight(3, 2.0, "dd")}}})},
      {{"e", "fprop", "w"}, with({{observed, {weight(3, 2.0, "ee")}}})},
      {{"e", "fprop", "x"}, with({{observed, {weight(3, 2.0, "ee")}}})},
  });
  inference.run = "serve";
  const auto c = check_inference(inference, training);
  REQUIRE(c);
  REQUIRE(c->weights.size() == 5);
  CHECK(c->flagged == 3);
  std::map<std::string, WeightVerdict> v;
  for (const WeightCheck& w : c->weights) v[w.tensor.layer] = w.verdict;
  CHECK(v["a"] == WeightVerdict::kMatches);  // the latest training capture, within fp32 round trip
  CHECK(v["b"] == WeightVerdict::kCodesDiffer);
  CHECK(v["c"] == WeightVerdict::kScaleDiffers);
  CHECK(v["d"] == WeightVerdict::kFormatDiffers);
  CHECK(v["e"] == WeightVerdict::kNotInTraining);
  // A run that cast no weight to FP8 itself has nothing to check.
  const RunRecords bf16 = run_of({{{"a", "fprop", "w"}, with({{kCurrent, {weight(1, 100.0, "01")}}})}});
  CHECK_FALSE(check_inference(bf16, training));
  // Nor does an FP8 training run held against a BF16 one: its weights are its own.
  RunRecords fp8_training = inference;
  fp8_training.tensors[{"a", "wgrad", "x"}] = with({{observed, {weight(3, 2.0, "ff")}}});
  CHECK_FALSE(check_inference(fp8_training, training));
}
