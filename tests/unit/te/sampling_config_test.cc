// TE debug-API configs as sampling rules: the configs of TE's tests and docs become the rules their
// sections say (layers, tensors, steps as TE counts them), what fp8scope does not do is listed, and
// every malformed config is refused naming the file, the line and the key.
#include <catch2/catch.hpp>

#include <fstream>
#include <optional>
#include <string>

#include "fp8scope/te/sampling_config.h"
#include "fp8scope/pattern/layer_pattern.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using fp8scope::te::read_te_config;
using fp8scope::te::TeConfig;

namespace {

const std::string kConfigs = FP8SCOPE_TE_CONFIGS;

TeConfig read(const std::string& name) {
  auto config = read_te_config(kConfigs + "/" + name);
  INFO(config.message());
  REQUIRE(config.ok());
  return config.value();
}

bool any_note(const TeConfig& c, const std::string& text) {
  for (const std::string& n : c.not_applied) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

// TE's step rule, written from features/utils/__init__.py:36-68: it % freq == 0 and s <= it <= e.
bool te_runs(std::uint64_t it, std::uint64_t freq, std::uint64_t s, std::optional<std::uint64_t> e) {
  return it % freq == 0 && it >= s && (!e || it <= *e);
}

bool selects_module(const SamplingRule& r, const std::string& module) {
  std::string error;
  for (const char* text : {r.layer_regex, r.and_layer_regex}) {
    if (*text == '\0') continue;
    const auto p = LayerPattern::compile(text, &error);
    REQUIRE(p);
    if (!p->search(module)) return false;
  }
  return true;
}

std::string error_of(const std::string& yaml) {
  testing::TempDir dir;
  std::ofstream(dir.file("bad.yaml")) << yaml;
  auto config = read_te_config(dir.file("bad.yaml"));
  REQUIRE_FALSE(config.ok());
  CHECK_THAT(config.message(), Catch::Contains(dir.file("bad.yaml") + ":"));
  return config.message();
}

}  // namespace

TEST_CASE("TE's log_config: the activation every 3rd and every 5th step from step 1, as TE counts", "[te_config]") {
  const TeConfig c = read("te_log_config.yaml");
  REQUIRE(c.rules.size() == 2);
  for (const auto& r : c.rules) {
    CHECK(r.rule.tensors == tensor_bit(GemmRole::kFprop, Operand::kX));
    CHECK(r.rule.group == 1);
    CHECK(selects_module(r.rule, "decoder.1.mlp.fc1"));
  }
  for (std::uint64_t it = 0; it < 40; ++it) {
    INFO(it);
    CHECK(rule_selects_step(c.rules[0].rule, it) == te_runs(it, 3, 1, std::nullopt));
    CHECK(rule_selects_step(c.rules[1].rule, it) == te_runs(it, 5, 1, std::nullopt));
  }
  CHECK(c.recipes.empty());  // underflows% unprefixed: the job's own cast
  CHECK_FALSE(any_note(c, "l1_norm"));  // computed: min, max and the norms are every tensor's statistics
}

TEST_CASE("TE's stats collection config: layer numbers, nvdlfw's own LogTensorStats left out, recipes by prefix",
          "[te_config]") {
  const TeConfig c = read("te_stats_collection.yaml");
  // Section 1: TE's LogTensorStats (freq 2) and LogFp8TensorStats (freq 5, two tensors merged);
  // nvdlfw's own LogTensorStats beside them is not applied: TE's modules never call it.
  // Section 2: activation freq 2; weight in two inclusive ranges; the fprop GEMM's output every step.
  REQUIRE(c.rules.size() == 5);
  const SamplingRule &te = c.rules[0].rule, &fp8 = c.rules[1].rule;
  CHECK((te.every_n_steps == 2 && fp8.every_n_steps == 5));
  CHECK(any_note(c, "collection_1.LogTensorStats: nvdlfw_inspect's own LogTensorStats: TE's modules call only "
                    "transformer_engine's features, so a TE job never runs it: not applied"));
  for (std::uint64_t it = 0; it < 600; ++it) {
    CHECK(rule_selects_step(te, it) == te_runs(it, 2, 100, 500));  // end_step inclusive
    CHECK(rule_selects_step(fp8, it) == te_runs(it, 5, 100, 500));
  }
  // _columnwise stats add the GEMM that reads each tensor's transposed copy, and are logged as named.
  CHECK(std::any_of(c.logged.begin(), c.logged.end(), [](const te::TeLoggedStats& l) {
    return std::find(l.stats.begin(), l.stats.end(), "fp8_block_scaling_scale_inv_min_columnwise") != l.stats.end();
  }));
  CHECK(fp8.tensors == (tensor_bit(GemmRole::kDgrad, Operand::kDy) | tensor_bit(GemmRole::kWgrad, Operand::kDy) |
                        tensor_bit(GemmRole::kFprop, Operand::kW) | tensor_bit(GemmRole::kDgrad, Operand::kW)));
  for (const char* module : {"decoder.1.self_attention.qkv", "decoder.3.mlp.fc1", "layers.03.x"}) {
    CHECK(selects_module(te, module));
  }
  for (const char* module : {"decoder.2.mlp.fc1", "decoder.13.mlp", "decoder.1.mlp.fc12", "no_number"}) {
    CHECK_FALSE(selects_module(te, module));
  }
  // mxfp8_mse for both tensors, fp8_block_scaling 1x128 for the gradient and 128x128 for the weight.
  CHECK(c.recipes == std::vector<RecipeKind>{RecipeKind::kMxfp8, RecipeKind::kBlock1x128, RecipeKind::kBlock128x128});

  const SamplingRule &activation = c.rules[2].rule, &weight = c.rules[3].rule;
  CHECK(activation.group == 2);
  CHECK(selects_module(activation, "decoder.6.mlp.fc1"));
  CHECK(selects_module(activation, "decoder.7.mlp.fc2"));
  CHECK_FALSE(selects_module(activation, "decoder.6.attn.qkv"));  // layer_types and layer_numbers hold together
  CHECK_FALSE(selects_module(activation, "decoder.5.mlp.fc1"));
  for (std::uint64_t it = 0; it < 120; ++it) {
    CHECK(rule_selects_step(weight, it) == (it % 5 == 0 && (it <= 20 || (it >= 80 && it <= 100))));
  }
  const SamplingRule& output = c.rules[4].rule;
  CHECK(output.tensors == tensor_bit(GemmRole::kFprop, Operand::kOut));
  CHECK((output.every_n_steps == 1 && selects_module(output, "decoder.6.mlp.fc1")));
  CHECK_FALSE(any_note(c, "a GEMM output"));
  CHECK(std::any_of(c.logged.begin(), c.logged.end(), [](const te::TeLoggedStats& l) {
    return l.operand == Operand::kOut && l.stats == std::vector<std::string>{"mean"};
  }));
  CHECK_FALSE(any_note(c, "min: not computed"));
  CHECK(any_note(c, "disabled_section: disabled"));
}

TEST_CASE("TE's getting-started config: the feature that changes the run is listed, the logging applies", "[te_config]") {
  const TeConfig c = read("te_getting_started.yaml");
  REQUIRE(c.rules.size() == 1);
  CHECK(c.rules[0].rule.group == 2);
  CHECK(selects_module(c.rules[0].rule, "transformer_layer.self_attention.layernorm_qkv"));
  CHECK_FALSE(selects_module(c.rules[0].rule, "transformer_layer.mlp.fc1"));
  for (std::uint64_t it = 0; it < 10; ++it) CHECK(rule_selects_step(c.rules[0].rule, it) == (it >= 2 && it <= 5));
  CHECK(any_note(c, "DisableFP8GEMM: runs GEMMs in high precision"));
  CHECK_THAT(c.not_applied.front(), Catch::Contains("te_getting_started.yaml:8:"));
}

// nvdlfw_inspect loads features from a job's feature_dirs too (TE's tests/pytorch/debug/
// test_configs/dummy_feature.yaml and its TestDummyFeature; the custom-feature tutorial).
TEST_CASE("a feature from the job's feature folder is listed, not applied, and the rest of the config applies",
          "[te_config]") {
  testing::TempDir dir;
  std::ofstream(dir.file("custom.yaml")) << "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n  transformer_engine:\n"
                                            "    TestDummyFeature: {enabled: true, inspect_only_once: true}\n"
                                            "    LogTensorStats: {enabled: true, tensors: [activation], stats: [mean], freq: 2}\n";
  auto config = read_te_config(dir.file("custom.yaml"));
  INFO(config.message());
  REQUIRE(config.ok());
  const TeConfig& c = config.value();
  REQUIRE(c.rules.size() == 1);  // the LogTensorStats part
  CHECK(selects_module(c.rules[0].rule, "layers.0.fc1"));
  CHECK(rule_selects_step(c.rules[0].rule, 4));
  CHECK_FALSE(rule_selects_step(c.rules[0].rule, 3));
  CHECK(any_note(c, "TestDummyFeature' is no feature of TE or nvdlfw_inspect"));
  CHECK(any_note(c, "feature_dirs"));
  CHECK_THAT(c.not_applied.front(), Catch::Contains("custom.yaml:5:"));
}

TEST_CASE("TE's high-precision config: max_blockwise_dynamic_range's shapes go to the daemon, named as TE names them",
          "[te_config]") {
  const TeConfig c = read("te_high_precision.yaml");
  CHECK(c.block_ranges == std::vector<BlockRange>{{4, 1}, {4, 2}});
  REQUIRE(c.logged.size() == 3);  // activation, gradient, weight
  for (const fp8scope::te::TeLoggedStats& l : c.logged) {
    CHECK(l.stats == std::vector<std::string>{"dynamic_range", "max_blockwise_dynamic_range_block_size_4_dims_1",
                                              "max_blockwise_dynamic_range_block_size_4_dims_2"});
  }
  CHECK(c.not_applied.empty());
  // TE's defaults: block_size 32, dims 1 (log_tensor_stats.py:114-115).
  testing::TempDir dir;
  std::ofstream(dir.file("default.yaml"))
      << "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n  transformer_engine:\n    LogTensorStats:\n"
         "      enabled: true\n      tensors: [weight]\n      stats: [{max_blockwise_dynamic_range: {}}]\n";
  const auto defaults = read_te_config(dir.file("default.yaml"));
  REQUIRE(defaults.ok());
  CHECK(defaults.value().block_ranges == std::vector<BlockRange>{{32, 1}});
  CHECK(defaults.value().logged.at(0).stats == std::vector<std::string>{"max_blockwise_dynamic_range_block_size_32_dims_1"});
}

TEST_CASE("malformed configs are refused with the file, line and key", "[te_config]") {
  CHECK_THAT(error_of("s:\n  layers:\n    layer_types: [fc1]\n"), Catch::Contains(":2: s: missing `enabled`"));
  CHECK_THAT(error_of("s:\n  enabled: true\n  layers:\n    layer_name_regex_pattern: '(?<!fc)1'\n"
                      "  transformer_engine:\n    LogTensorStats: {enabled: true, tensors: [activation], stats: [mean]}\n"),
             Catch::Contains(":4: s.layers.layer_name_regex_pattern: cannot be matched exactly") &&
                 Catch::Contains("lookaround"));
  CHECK_THAT(error_of("s:\n  enabled: true\n  layers: {layer_types: [a]}\ns:\n  enabled: false\n"),
             Catch::Contains("given twice"));
  CHECK_THAT(error_of("s: {enabled: false}\n---\nt: {enabled: false}\n"), Catch::Contains("2 YAML documents"));
  CHECK_THAT(error_of("s:\n  enabled: true\n  layers: {layer_types: [a]}\n  transformer_engine:\n"
                      "    LogTensorStats: {enabled: true, tensors: [activation], stats: [mean], freq: 0}\n"),
             Catch::Contains(":5: s.transformer_engine.LogTensorStats activation.freq: expected 1 or more"));
  CHECK_THAT(error_of("s:\n  enabled: true\n  layers: {layer_types: [a]}\n  transformer_engine:\n"
                      "    LogFp8TensorStats: {enabled: true, tensors: [weight], stats: [underflows]}\n"),
             Catch::Contains("Stat underflows is not supported"));
  CHECK_THAT(error_of("s:\n  enabled: true\n  layers: {layer_types: [a]}\n  transformer_engine:\n"
                      "    LogFp8TensorStats: {enabled: true, tensors: [weight], stats: [fp8_current_scaling_mse_columnwise]}\n"),
             Catch::Contains("_columnwise is not supported for fp8_current_scaling"));
  CHECK_THAT(error_of("s:\n  enabled: true\n  layers: {layer_numbers: 3}\n"), Catch::Contains("s.layers.layer_numbers"));
  CHECK_THAT(error_of("s: [\n"), Catch::Contains("not YAML"));
  CHECK_THAT(error_of("s: {enabled: false}\n"), Catch::Contains("no enabled section"));
  const std::string block_range = "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n  transformer_engine:\n"
                                  "    LogTensorStats:\n      enabled: true\n      tensors: [weight]\n      stats: [";
  CHECK_THAT(error_of(block_range + "{max_blockwise_dynamic_range: {block_size: 4, dims: 3}}]\n"),
             Catch::Contains("expected block_size > 0 and dims 1 or 2"));
  CHECK_THAT(error_of(block_range + "{max_blockwise_dynamic_range: {block: 4}}]\n"), Catch::Contains("unknown key block"));
}
