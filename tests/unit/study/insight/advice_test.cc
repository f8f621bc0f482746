// Attribution, amax replay, advice and its formats on hand-made records whose answer is known:
// a tensor whose overflow jumps at the onset is named first; a replay of a slowly growing amax
// finds the margin that stops the clipping; thresholds map to the recommendation the README
// promises; the TE YAML parses into the sections it should, the Megatron list counts from the ends.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <sstream>

#include "fp8scope/insight/advice.h"
#include "fp8scope/insight/advice_formats.h"
#include "support/te_debug_config_rules.h"
#include "fp8scope/insight/amax_replay.h"
#include "fp8scope/insight/attribution.h"
#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/insight/inference_check.h"

using namespace fp8scope;
using namespace fp8scope::insight;

namespace {

// The YAML advise writes, read back through fp8scope's own reader, is the config it wrote.
bool reads_back(const RunAdvice& advice, const TeYamlOptions& options = {}) {
  std::ostringstream yaml;
  write_te_debug_yaml(advice, yaml, options);
  const Result<te::DebugConfig> back = te::parse_debug_config(yaml.str(), "advise.yaml");
  INFO(yaml.str() << back.message());
  return back.ok() && back.value() == te_debug_config(advice, options) && !back.value().sections.empty();
}

RecordPoint point(std::uint64_t step, std::initializer_list<std::pair<const char*, double>> stats, double scale = 1.0,
                  double scale_current = 1.0) {
  RecordPoint p;
  p.step = step;
  p.scale = scale;
  p.scale_current = scale_current;
  p.statistics.fill(std::nan(""));
  for (const auto& [key, value] : stats) {
    const std::optional<std::size_t> i = studied_statistic_index(key);
    REQUIRE(i.has_value());
    p.statistics[*i] = value;
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

// A series key in the history's words: "observed" or a recipe's name, and a format's.
RecipeKey key(const char* caster, const char* format) {
  return RecipeKey{Caster::from_name(caster).value(), &format_row(format_from_name(format).value())};
}

TensorRecords with(std::initializer_list<std::pair<RecipeKey, std::vector<RecordPoint>>> recipes) {
  TensorRecords t;
  for (const auto& [k, v] : recipes) t.recipes[k] = v;
  return t;
}

const RecipeKey kCurrent = key("tensor_current", "e4m3"), kDelayed = key("tensor_delayed", "e4m3");

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
      {{"blocks.3.mlp", "dgrad", "dy"}, with({{key("observed", "e4m3"), e4m3_dy}})},
      {{"blocks.3.mlp", "wgrad", "dy"}, with({{key("observed", "e4m3"), e4m3_dy}, {kCurrent, narrow_bf16_dy}})},
  });
  const RunAdvice advice = advise(run, {});
  REQUIRE(advice.tensors.size() == 6);
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

  SECTION("the TE debug-API YAML: one DisableQuantizationLayer section, one PerTensorScaling, recipe notes as comments") {
    std::ostringstream yaml;
    write_te_debug_yaml(advice, yaml);
    const std::string y = yaml.str();
    CHECK_THAT(y, Catch::Contains("layer_name_regex_pattern: '^(blocks\\.1\\.mlp)$'\n  transformer_engine:\n"
                                  "    DisableQuantizationLayer:\n      enabled: True\n"));
    CHECK_THAT(y, Catch::Contains("layer_name_regex_pattern: '^(blocks\\.2\\.mlp)$'\n  transformer_engine:\n"
                                  "    PerTensorScaling:\n      enabled: True\n      gemms_struct:\n"
                                  "        - gemm: wgrad\n          tensors: [activation]\n"));
    CHECK_THAT(y, Catch::Contains("#   blocks.3.mlp dgrad dy: E5M2 for Dy"));
    CHECK(testing::te_debug_config_violations(y, {"blocks.0.attn", "blocks.1.mlp", "blocks.2.mlp", "blocks.3.mlp"}) ==
          std::vector<std::string>{});
    CHECK(reads_back(advice));
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
  const RecipeKey observed = key("observed", "e4m3");
  RunRecords training = run_of({
      {{"a", "fprop", "w"}, with({{kCurrent, {weight(1, 100.0, "01"), weight(9, 448.0, "aa")}}})},
      {{"b", "fprop", "w"}, with({{observed, {weight(9, 64.0, "bb")}}})},
      {{"c", "fprop", "w"}, with({{kCurrent, {weight(9, 2.0, "cc")}}})},
      {{"d", "fprop", "w"}, with({{key("observed", "e5m2"), {weight(9, 2.0, "dd")}}})},
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

TEST_CASE("advice: a block-scaled job is judged by its own recipe's what-if, and FP4 losses point to MXFP8",
          "[advice]") {
  // An NVFP4 job captured its tensors as E2M1 codes with 1x16 UE4M3 block scales; its BF16
  // baseline has the what-ifs of every recipe. One tensor NVFP4 loses and MXFP8 holds; one that
  // both hold has observed scales far above the per-tensor current scale, which is no lag for
  // block scales (each block's scale comes from its own amax).
  std::vector<RecordPoint> nvfp4_lossy = healthy(30);
  for (RecordPoint& p : nvfp4_lossy) p = point(p.step, {{"underflow_ratio", 0.04}, {"sqnr_db", 12.0}, {"amax", 4.0}});
  std::vector<RecordPoint> observed_blocks = healthy(30);
  for (RecordPoint& p : observed_blocks) p.scale = 64 * p.scale_current;
  auto fp4 = [&](std::vector<RecordPoint> observed) {
    TensorRecords t = with({{key("observed", "e2m1"), std::move(observed)}});
    t.dtype = DType::kE2M1;
    t.scale_layout = ScaleLayout::kVec16Ue4m3;
    return t;
  };
  RunRecords run = run_of({{{"blocks.0.mlp", "fprop", "x"}, fp4(observed_blocks)},
                           {{"blocks.1.mlp", "fprop", "x"}, fp4(observed_blocks)}});
  run.run = "nvfp4";
  RunRecords baseline = run_of({
      {{"blocks.0.mlp", "fprop", "x"},
       with({{key("nvfp4", "e2m1"), healthy(30)}, {key("mxfp8", "e4m3"), healthy(30)}, {kCurrent, nvfp4_lossy}})},
      {{"blocks.1.mlp", "fprop", "x"},
       with({{key("nvfp4", "e2m1"), nvfp4_lossy}, {key("mxfp8", "e4m3"), healthy(30)}, {kCurrent, healthy(30)}})},
  });
  baseline.run = "bf16";
  const RunAdvice advice = advise(run, {}, &baseline);
  REQUIRE(advice.tensors.size() == 2);
  std::map<std::string, const TensorAdvice*> by;
  for (const TensorAdvice& t : advice.tensors) by[t.tensor.layer] = &t;
  const TensorAdvice& held = *by["blocks.0.mlp"];
  const TensorAdvice& lost = *by["blocks.1.mlp"];
  // Judged by the baseline's nvfp4 what-if, not by tensor_current (which says the opposite).
  CHECK(held.what_if_recipe == RecipeKind::kNvfp4);
  CHECK(held.what_if_source == "bf16");
  CHECK(held.observed_layout == ScaleLayout::kVec16Ue4m3);
  CHECK(held.recommendation == Recommendation::kKeepFp8);
  CHECK(held.sqnr_current_db == 31.0);
  CHECK(std::isnan(held.lagging_share));
  CHECK_FALSE(held.replay);
  CHECK(lost.recommendation == Recommendation::kFinerRecipe);
  CHECK(lost.finer_recipe == RecipeKind::kMxfp8);
  CHECK(lost.sqnr_current_db == 12.0);
  CHECK_THAT(lost.reason, Catch::Contains("the job's recipe (nvfp4)"));
  CHECK_THAT(lost.reason, Catch::Contains("mxfp8 keeps SQNR at 31.0 dB"));

  SECTION("without an MXFP8 what-if that holds, the answer is BF16") {
    baseline.tensors[{"blocks.1.mlp", "fprop", "x"}].recipes.erase(key("mxfp8", "e4m3"));
    const RunAdvice no_mxfp8 = advise(run, {}, &baseline);
    for (const TensorAdvice& t : no_mxfp8.tensors) {
      if (t.tensor.layer == "blocks.1.mlp") CHECK(t.recommendation == Recommendation::kFallBackToBf16);
    }
  }
  SECTION("the TE YAML names the finer recipe as a recipe setting, and the JSON carries it") {
    std::ostringstream yaml;
    write_te_debug_yaml(advice, yaml);
    CHECK_THAT(yaml.str(), Catch::Contains("#   blocks.1.mlp fprop x: MXFP8 for this tensor - the job's recipe (nvfp4)"));
    CHECK_THAT(yaml.str(), !Catch::Contains("DisableQuantizationLayer"));
    const std::string json = advice_json(advice);
    CHECK_THAT(json, Catch::Contains("\"finer_recipe\":\"mxfp8\""));
    CHECK_THAT(json, Catch::Contains("\"what_if_recipe\":\"nvfp4\""));
  }
}

TEST_CASE("advice: a tensor fine most steps but lossy at some gets AutoswitchGemm thresholds between the two",
          "[advice]") {
  // Underflow 1e-5 and MSE 1e-4 at most steps; at every tenth, underflow 2% (past the severe 1%)
  // and MSE 1e-2. The thresholds sit at the geometric means: the typical step stays below them,
  // the bad ones cross.
  std::vector<RecordPoint> bursty = healthy(40);
  for (std::size_t i = 5; i < bursty.size(); i += 10) {
    bursty[i] = point(bursty[i].step, {{"underflow_ratio", 0.02}, {"mse", 1e-2}, {"sqnr_db", 31.0}, {"amax", 4.0}});
  }
  RunRecords run = run_of({{{"blocks.4.attn.qkv", "fprop", "x"}, with({{kCurrent, bursty}, {kDelayed, healthy(40)}})},
                           {{"blocks.5.attn.qkv", "fprop", "x"}, with({{kCurrent, healthy(40)}, {kDelayed, healthy(40)}})}});
  run.sampling_interval = 4;
  const RunAdvice advice = advise(run, {});
  std::map<std::string, const TensorAdvice*> by;
  for (const TensorAdvice& t : advice.tensors) by[t.tensor.layer] = &t;
  const TensorAdvice& b = *by["blocks.4.attn.qkv"];
  CHECK(b.recommendation == Recommendation::kKeepFp8);
  REQUIRE(b.autoswitch);
  CHECK(b.autoswitch->underflow_pct == Approx(100.0 * std::sqrt(2e-4 * 0.02)));  // the median is under 1% of the worst
  CHECK(b.autoswitch->mse == Approx(std::sqrt(1e-4 * 1e-2)));
  CHECK(b.autoswitch->underflow_pct < 2.0);
  CHECK(b.autoswitch->underflow_pct > 1e-3);
  CHECK_FALSE(by["blocks.5.attn.qkv"]->autoswitch);

  // TE's main branch has no AutoswitchGemm (PR #2883): by default the thresholds are a comment only.
  std::ostringstream plain;
  write_te_debug_yaml(advice, plain);
  CHECK_THAT(plain.str(), !Catch::Contains("AutoswitchGemm:") && !Catch::Contains("transformer_engine:"));
  CHECK_THAT(plain.str(), Catch::Contains("--te-features autoswitch_gemm writes it") &&
                              Catch::Contains("#   blocks.4.attn.qkv fprop x: underflow 0.2%, mse 0.001"));
  std::ostringstream yaml;
  write_te_debug_yaml(advice, yaml, TeYamlOptions{true});
  CHECK_THAT(yaml.str(), Catch::Contains("layer_name_regex_pattern: '^(blocks\\.4\\.attn\\.qkv)$'\n  transformer_engine:\n"
                                         "    AutoswitchGemm:\n      enabled: True\n      gemms: [fprop]\n"
                                         "      tensors: [activation]\n      underflow_threshold_pct: 0.2\n"
                                         "      mse_threshold: 0.001\n      freq: 4\n"));
  CHECK_THAT(yaml.str(), !Catch::Contains("blocks\\.5"));
  // What TE main loads: no section at all by default (only comments), and with the PR's feature
  // asked for, a config the PR's TE loads.
  CHECK(testing::te_debug_config_violations(plain.str(), {"blocks.4.attn.qkv", "blocks.5.attn.qkv"}) ==
        std::vector<std::string>{"the config has no sections"});
  CHECK(testing::te_debug_config_violations(yaml.str(), {"blocks.4.attn.qkv", "blocks.5.attn.qkv"}, true) ==
        std::vector<std::string>{});
  CHECK(reads_back(advice, TeYamlOptions{true}));
}

TEST_CASE("the TE config checker refuses what TE main or nvdlfw_inspect would", "[advice]") {
  const std::vector<std::string> layers = {"blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "blocks.1.mlp.fc1"};
  const std::string good =
      "a:\n  enabled: True\n  layers:\n    layer_name_regex_pattern: '^(blocks\\.0\\.mlp\\.fc1)$'\n"
      "  transformer_engine:\n    DisableQuantizationGEMM:\n      enabled: True\n      gemms: [fprop, wgrad]\n";
  CHECK(testing::te_debug_config_violations(good, layers) == std::vector<std::string>{});
  const auto broken = [&](const std::string& from, const std::string& to) {
    std::string y = good;
    y.replace(y.find(from), from.size(), to);
    return testing::te_debug_config_violations(y, layers);
  };
  using V = std::vector<std::string>;
  CHECK(broken("  enabled: True\n  layers", "  layers") == V{"a: no enabled"});
  CHECK(broken("layer_name_regex_pattern", "layer_name") ==
        V{"a: layers names none of layer_numbers, layer_types, exact_layer_names, layer_name_regex_pattern"});
  CHECK(broken("DisableQuantizationGEMM", "DisableFP8GEMM") ==
        V{"a: DisableFP8GEMM is not a feature TE's main branch registers (by its current name)"});
  CHECK(broken("DisableQuantizationGEMM", "AutoswitchGemm") ==
        V{"a: AutoswitchGemm is not a feature TE's main branch registers (by its current name)"});
  CHECK(broken("gemms: [fprop, wgrad]", "gemms: [fprop, backward]") == V{"a: DisableQuantizationGEMM: gemm backward"});
  CHECK(broken("gemms: [fprop, wgrad]", "tensors: [weight]") ==
        V{"a: DisableQuantizationGEMM: unexpected key tensors", "a: DisableQuantizationGEMM: needs gemms or gemms_struct"});
  CHECK(testing::te_debug_config_violations(good + "b:\n  enabled: True\n  layers:\n    layer_name_regex_pattern: 'fc1'\n"
                                                   "  transformer_engine:\n    DisableQuantizationLayer:\n      enabled: True\n",
                                            layers) == V{"blocks.0.mlp.fc1 is selected by a and b"});
  CHECK(testing::te_debug_config_violations("a: [1]\n", layers) == V{"a: a section is a map"});
}

TEST_CASE("advice: N(0, 1) data is fine under every recipe by that recipe's levels, and FP4's levels are not FP8's",
          "[advice]") {
  // Each recipe's cast of the same unit Gaussian, by the real CPU engine, judged as the sole
  // record of a tensor the job cast with that recipe: keep, at low risk, whatever the format.
  // FP8's levels would condemn the FP4 casts outright.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> data(256 * 256);
  for (float& x : data) x = normal(rng);
  auto engine = make_cpu_engine(1);
  const std::pair<const char*, const char*> layouts[] = {{"tensor_current", ""},       {"mxfp8", "vec32_ue8m0"},
                                                         {"block_1x128", "vec128_32f"}, {"nvfp4", "vec16_ue4m3"},
                                                         {"mxfp4", "vec32_ue8m0"},
                                                         {"nvfp4_row", "vec16_ue4m3_row_scaled"}};
  for (const auto& [name, layout] : layouts) {
    INFO(name);
    const Recipe recipe = default_recipe(recipe_kind_from_name(name).value());
    const CastFormat format = recipe.fp4() ? CastFormat::kE2M1 : CastFormat::kE4M3;
    const QuantSpec spec = quant_spec_for(recipe, format, Operand::kX, {}).value();
    TensorAnalysis a;
    REQUIRE(engine->analyze(TensorView{data.data(), DType::kF32, 256, 256, 1.0f}, {&spec, 1}, &a).ok());
    RecordPoint p;
    for (std::size_t i = 0; i < kStudiedStatisticCount; ++i) {
      p.statistics[i] = find_statistic(kStudiedStatistics[i])->value(a.moments, a.quant[0], ChannelSummary{});
    }
    TensorRecords own = with({{key(name, recipe.fp4() ? "e2m1" : "e4m3"), {p}}});
    own.dtype = recipe.fp4() ? DType::kE2M1 : DType::kE4M3;
    own.scale_layout = *layout != '\0' ? scale_layout_from_name(layout)->value : ScaleLayout::kNone;
    RunRecords run = run_of({{{"l", "fprop", "x"}, own}});
    const RunAdvice advice = advise(run, {});
    REQUIRE(advice.tensors.size() == 1);
    const TensorAdvice& t = advice.tensors[0];
    CHECK(t.what_if_recipe == recipe_kind_from_name(name));
    CHECK(t.recommendation == Recommendation::kKeepFp8);
    CHECK(t.risk < 0.5);
    if (recipe.fp4()) {
      const Threshold& underflow = advice_thresholds()[0];
      REQUIRE(std::string(underflow.signal) == "underflow_ratio");
      CHECK(t.underflow_current > underflow.fp8.severe);  // a 4-bit cast flushes several % of N(0, 1)
      CHECK(t.underflow_current < underflow.fp4.concern);
    }
  }
}

TEST_CASE("inference check: block-scaled weights against training's own codes of the same layout", "[inference_check]") {
  auto weight = [](std::uint64_t step, double smallest, double largest, const char* digest) {
    RecordPoint p = point(step, {{"amax", 1.0}}, smallest, smallest);
    p.scale_max = largest;
    p.codes_digest = digest;
    return p;
  };
  auto blocks = [](const char* format, const char* layout, RecordPoint p) {
    TensorRecords t = with({{key("observed", format), {p}}});
    t.scale_layout = scale_layout_from_name(layout)->value;
    return t;
  };
  RunRecords training = run_of({
      {{"same", "fprop", "w"}, blocks("e4m3", "vec32_ue8m0", weight(9, 0.5, 64.0, "aa"))},
      {{"rescaled", "fprop", "w"}, blocks("e4m3", "vec32_ue8m0", weight(9, 0.5, 64.0, "bb"))},
      {{"other_recipe", "fprop", "w"}, blocks("e4m3", "vec32_ue8m0", weight(9, 0.5, 64.0, "cc"))},
      {{"bf16", "fprop", "w"}, with({{kCurrent, {weight(9, 100.0, 100.0, "dd")}}})},
      {{"per_tensor", "fprop", "w"}, blocks("e4m3", "vec128_32f", weight(9, 2.0, 8.0, "ee"))},
  });
  training.run = "train";
  RunRecords inference = run_of({
      {{"same", "fprop", "w"}, blocks("e4m3", "vec32_ue8m0", weight(3, 0.5, 64.0, "aa"))},
      {{"rescaled", "fprop", "w"}, blocks("e4m3", "vec32_ue8m0", weight(3, 0.5, 128.0, "bb"))},
      {{"other_recipe", "fprop", "w"}, blocks("e2m1", "vec16_ue4m3", weight(3, 0.5, 64.0, "cc"))},
      {{"bf16", "fprop", "w"}, blocks("e4m3", "vec32_ue8m0", weight(3, 0.5, 64.0, "dd"))},
      {{"per_tensor", "fprop", "w"}, with({{key("observed", "e4m3"), {weight(3, 2.0, 2.0, "ee")}}})},
  });
  inference.run = "serve";
  const auto c = check_inference(inference, training);
  REQUIRE(c);
  std::map<std::string, WeightCheck> v;
  for (const WeightCheck& w : c->weights) v[w.tensor.layer] = w;
  CHECK(v["same"].verdict == WeightVerdict::kMatches);
  CHECK(v["rescaled"].verdict == WeightVerdict::kScaleDiffers);
  CHECK_THAT(v["rescaled"].detail, Catch::Contains("0.5 to 128, training ended with 0.5 to 64"));
  CHECK(v["other_recipe"].verdict == WeightVerdict::kFormatDiffers);
  CHECK_THAT(v["other_recipe"].detail, Catch::Contains("vec16_ue4m3"));
  // The daemon fingerprints a BF16 weight's per-tensor cast only: nothing to hold MXFP8 codes to.
  CHECK(v["bf16"].verdict == WeightVerdict::kNotComparable);
  // Per-tensor codes against training's 1x128 blocks: its smallest block scale is no per-tensor scale.
  CHECK(v["per_tensor"].verdict == WeightVerdict::kFormatDiffers);
  CHECK(c->flagged == 3);
}

TEST_CASE("advice: a figure that is undefined reads '-' in the reason, as in the tables, never 'nan'", "[advice]") {
  // An all-zero activation: nothing underflows, and its SQNR (signal over error, 0 over 0) has no value.
  std::vector<RecordPoint> zeros = healthy(30);
  for (RecordPoint& p : zeros) {
    p = point(p.step, {{"underflow_ratio", 0.0}, {"sqnr_db", std::nan("")}, {"amax", 0.0}, {"cosine", 1.0}});
  }
  const RunAdvice advice =
      advise(run_of({{{"blocks.0.attn", "fprop", "x"}, with({{kCurrent, zeros}, {kDelayed, zeros}})}}), {});
  REQUIRE(advice.tensors.size() == 1);
  CHECK(advice.tensors[0].recommendation == Recommendation::kKeepFp8);
  CHECK_THAT(advice.tensors[0].reason, Catch::Contains("SQNR - dB"));
  CHECK_THAT(advice.tensors[0].reason, !Catch::Contains("nan"));
}

TEST_CASE("every signal the risk is scored on has its thresholds", "[advice]") {
  for (const char* signal : kAdviceSignals) {
    INFO(signal);
    const auto& table = advice_thresholds();
    CHECK(std::any_of(table.begin(), table.end(), [&](const Threshold& t) { return std::string(t.signal) == signal; }));
  }
}
