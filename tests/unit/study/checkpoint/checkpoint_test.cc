// fp8scope checkpoint on exports the tests write as each convention's producer does (support/
// checkpoint_exports.h): every convention round-trips to "matches" against its reference, a
// sharded export with an index and a checkpoint mixing BF16 and FP8 layers included; each classic
// mistake, made on purpose, is diagnosed by name; bad files give errors naming file and tensor.
#include "fp8scope/checkpoint/checkpoint_check.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "support/checkpoint_exports.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using namespace fp8scope::checkpoint;
using namespace fp8scope::testing;

namespace {

struct Pair {
  TempDir dir;
  std::string exported() const { return dir.file("export"); }
  std::string reference() const { return dir.file("reference"); }
};

CheckpointReport checked(const Pair& p, bool with_reference = true) {
  Result<CheckpointReport> r = check_checkpoint(p.exported(), with_reference ? p.reference() : "");
  INFO(r.message());
  REQUIRE(r.ok());
  return std::move(r).value();
}

const WeightReport& weight(const CheckpointReport& r, const std::string& module) {
  for (const WeightReport& w : r.weights) {
    if (w.module == module) return w;
  }
  FAIL("no weight " << module);
  return r.weights.front();
}

std::string findings(const CheckpointReport& r) {
  std::string s;
  for (const auto& [where, f] : r.structure) s += where + ": " + f.code + " " + f.message + "\n";
  for (const WeightReport& w : r.weights) {
    for (const Finding& f : w.findings) s += w.module + ": " + f.code + " " + f.message + "\n";
  }
  return s;
}

void require_all_match(const CheckpointReport& r, std::size_t weights) {
  INFO(findings(r));
  CHECK(r.errors == 0);
  CHECK(r.warnings == 0);
  REQUIRE(r.weights.size() == weights);
  for (const WeightReport& w : r.weights) {
    INFO(w.module);
    CHECK(w.verdict == "matches");
    CHECK(w.compared);
    CHECK(w.codes_differing == 0);
    CHECK(w.scales_differing == 0);
    CHECK(w.cosine > 0.99);
  }
}

// Two layers of one convention plus a BF16 lm_head, beside their BF16 reference.
template <class Layer>
void write_pair(const Pair& p, const std::string& config, Layer layer, std::int64_t rows, std::int64_t cols, int shards = 1) {
  std::vector<StTensor> exported, reference;
  for (int l = 0; l < 2; ++l) {
    const std::string module = "model.layers." + std::to_string(l) + ".mlp.down_proj";
    const Weight w = random_weight(rows, cols, 17u + static_cast<unsigned>(l));
    for (StTensor& t : layer(module, w)) exported.push_back(std::move(t));
    reference.push_back(bf16_tensor(module + ".weight", w));
  }
  const Weight head = random_weight(32, cols, 99);
  exported.push_back(bf16_tensor("lm_head.weight", head));
  reference.push_back(bf16_tensor("lm_head.weight", head));
  write_export(p.exported(), config, exported, shards);
  write_export(p.reference(), "{}", reference);
}

}  // namespace

TEST_CASE("every convention's export, made as its producer makes it, matches its reference", "[checkpoint]") {
  SECTION("DeepSeek-V3 block FP8, blocks cut by the edges (300 x 200)") {
    Pair p;
    write_pair(p, kDeepSeekConfig, [](auto m, auto w) { return deepseek_layer(m, w); }, 300, 200);
    const CheckpointReport r = checked(p);
    require_all_match(r, 2);
    CHECK(r.declaration.convention == Convention::kDeepSeekBlockFp8);
    CHECK(r.declaration.declared);
    CHECK(weight(r, "model.layers.0.mlp.down_proj").scale_layout == "128x128 F32");
  }
  SECTION("compressed-tensors FP8, per channel and per 128x128 block, BF16 scales") {
    for (bool block : {false, true}) {
      Pair p;
      write_pair(p, compressed_tensors_config(block), [block](auto m, auto w) { return compressed_tensors_layer(m, w, block); },
                 256, 160);
      const CheckpointReport r = checked(p);
      require_all_match(r, 2);
      CHECK(r.declaration.convention == Convention::kCompressedTensorsFp8);
      CHECK(weight(r, "model.layers.1.mlp.down_proj").scale_layout == (block ? "128x128 BF16" : "per row BF16"));
    }
  }
  SECTION("ModelOpt FP8, a 0-d scale, and NVFP4 with its per-tensor factor") {
    Pair fp8, fp4;
    write_pair(fp8, kModelOptFp8Config, [](auto m, auto w) { return modelopt_fp8_layer(m, w); }, 64, 96);
    write_pair(fp4, kModelOptNvfp4Config, [](auto m, auto w) { return modelopt_nvfp4_layer(m, w); }, 64, 128);
    require_all_match(checked(fp8), 2);
    const CheckpointReport r = checked(fp4);
    require_all_match(r, 2);
    CHECK(r.declaration.convention == Convention::kModelOptNvfp4);
    CHECK(weight(r, "model.layers.0.mlp.down_proj").scale_layout == "1x16 UE4M3");
  }
  SECTION("gpt-oss MXFP4 experts against transformers' [E, in, out] reference") {
    Pair p;
    const std::vector<Weight> experts = {random_weight(64, 128, 5), random_weight(64, 128, 6), random_weight(64, 128, 7)};
    write_export(p.exported(), kGptOssConfig, gpt_oss_experts("model.layers.0.mlp.experts.down_proj", experts));
    write_export(p.reference(), "{}", {gpt_oss_reference("model.layers.0.mlp.experts.down_proj", experts)});
    const CheckpointReport r = checked(p);
    require_all_match(r, 1);
    CHECK(r.weights[0].shape == std::vector<std::int64_t>{3, 64, 128});
  }
  SECTION("per-tensor FP8, and the same export without a config: detected, and why") {
    Pair p;
    write_pair(p, kPerTensorConfig, [](auto m, auto w) { return per_tensor_layer(m, w); }, 48, 64);
    require_all_match(checked(p), 2);
    std::filesystem::remove(p.exported() + "/config.json");
    const CheckpointReport detected = checked(p);
    require_all_match(detected, 2);
    CHECK_FALSE(detected.declaration.declared);
    CHECK(detected.declaration.why == "one weight_scale value per FP8 weight");
  }
  SECTION("an export in three shards with its index") {
    Pair p;
    write_pair(p, kDeepSeekConfig, [](auto m, auto w) { return deepseek_layer(m, w); }, 256, 256, 3);
    REQUIRE(std::filesystem::exists(p.exported() + "/model-00003-of-00003.safetensors"));
    const CheckpointReport r = checked(p);
    require_all_match(r, 2);
    CHECK(r.structure.empty());
  }
}

TEST_CASE("without a reference, the weights are checked on their own", "[checkpoint]") {
  Pair p;
  write_pair(p, kDeepSeekConfig, [](auto m, auto w) { return deepseek_layer(m, w); }, 256, 256);
  const CheckpointReport r = checked(p, false);
  INFO(findings(r));
  CHECK(r.errors == 0);
  const WeightReport& w = weight(r, "model.layers.0.mlp.down_proj");
  CHECK_FALSE(w.compared);
  CHECK(w.verdict == "ok");
  const Weight ref = random_weight(256, 256, 17);
  CHECK(w.amax == Approx(block_amax(ref, 0, 0, 256, 256)).epsilon(0.07));  // within E4M3's step at the top
  CHECK(w.nonfinite_codes == 0);
  CHECK(w.scales == 4);
}

TEST_CASE("the figures equal a plain fp64 computation over the codes, at widths that leave row tails", "[checkpoint]") {
  // The passes run in vector lanes with scalar tails and split rows over threads: at 203 columns
  // every row has a tail, and with 10331 rows (2.1M elements) the rows are split over the cores.
  for (const std::int64_t rows : {std::int64_t{37}, std::int64_t{10331}}) {
    Pair p;
    const std::int64_t cols = 203;
    Weight w = random_weight(rows, cols, 23);
    w.v[5] = 0.0f;  // a zero: amin counts the nonzero values only
    std::vector<StTensor> layer = per_tensor_layer("m", w);
    std::vector<std::uint8_t> codes(layer[0].bytes.begin(), layer[0].bytes.end());
    codes[7] = 0x7F;  // a NaN code, left out of the error sums
    layer[0].bytes = bytes_of(codes);
    write_export(p.exported(), kPerTensorConfig, layer);
    write_export(p.reference(), "{}", {bf16_tensor("m.weight", w)});
    float s;
    std::memcpy(&s, layer[1].bytes.data(), 4);
    double se = 0, dot = 0, rs = 0, ts = 0, max_err = 0, amax = 0, amin = HUGE_VAL;
    std::uint64_t at_max = 0, differing = 0;
    for (std::size_t i = 0; i < codes.size(); ++i) {
      const double v = e4m3_value(codes[i]) * s, x = w.v[i];  // dequantized in fp32, as engines do
      at_max += (codes[i] & 0x7F) == 0x7E;
      differing += codes[i] != e4m3(w.v[i] / s);
      if (!std::isfinite(v)) continue;
      se += (v - x) * (v - x), dot += v * x, rs += x * x, ts += v * v;
      max_err = std::max(max_err, std::fabs(v - x));
      if (v != 0) amax = std::max(amax, std::fabs(v)), amin = std::min(amin, std::fabs(v));
    }
    const CheckpointReport r = checked(p);
    const WeightReport& got = weight(r, "m");
    INFO(rows << " rows; " << findings(r));
    CHECK(got.nonfinite_codes == 1);
    CHECK(got.codes_at_max == at_max);
    CHECK(got.codes_differing == differing);
    CHECK(differing == 1);
    CHECK(got.amax == Approx(amax).epsilon(1e-12));
    CHECK(got.amin == Approx(amin).epsilon(1e-12));
    CHECK(got.mse == Approx(se / static_cast<double>(codes.size() - 1)).epsilon(1e-9));
    CHECK(got.cosine == Approx(dot / std::sqrt(rs * ts)).epsilon(1e-10));  // fp64 sums in another order
    CHECK(got.max_abs_error == Approx(max_err).epsilon(1e-12));
    CHECK(got.relative_error == Approx(std::sqrt(se / rs)).epsilon(1e-9));
  }
}

TEST_CASE("each classic mistake, made on purpose, is diagnosed by name", "[checkpoint]") {
  const Weight w0 = random_weight(256, 256, 17), w1 = random_weight(256, 256, 18);
  const std::string m0 = "model.layers.0.mlp.down_proj", m1 = "model.layers.1.mlp.down_proj";
  // Layer 0 (made wrong) and layer 1 in one export, beside the reference of both (layer 0's `ref0`).
  auto write_layers = [&](const Pair& p, const std::string& config, std::vector<StTensor> layer0,
                          const std::vector<StTensor>& layer1, const Weight& ref0) {
    std::vector<StTensor> exported = std::move(layer0);
    exported.insert(exported.end(), layer1.begin(), layer1.end());
    write_export(p.exported(), config, exported);
    write_export(p.reference(), "{}", {bf16_tensor(m0 + ".weight", ref0), bf16_tensor(m1 + ".weight", w1)});
  };
  auto make = [&](const Pair& p, const std::string& config, std::vector<StTensor> layer0) {
    write_layers(p, config, std::move(layer0), per_tensor_layer(m1, w1), w0);
  };
  // One convention's layer 0 and layer 1, by name.
  struct LayerPair {
    std::string name, config;
    std::vector<StTensor> layer0, layer1;
  };
  auto verdict = [](const Pair& p) {
    const CheckpointReport r = checked(p);
    INFO(findings(r));
    CHECK(weight(r, "model.layers.1.mlp.down_proj").verdict == "matches");  // the untouched layer
    CHECK(r.errors >= 1);
    return weight(r, "model.layers.0.mlp.down_proj").verdict;
  };
  SECTION("a scale stored where its inverse is expected") {
    Pair p;
    const float s = block_amax(w0, 0, 0, 256, 256) / 448.0f;
    make(p, kPerTensorConfig, per_tensor_layer(m0, w0, 1.0f / s));
    CHECK(verdict(p) == "inverted_scale");
    CHECK(weight(checked(p), m0).codes_differing == 0);  // the codes are right; only the scale is not
  }
  SECTION("NVFP4's per-tensor factor inverted") {
    Pair p;
    std::vector<StTensor> l0 = modelopt_nvfp4_layer(m0, w0);
    float s2;
    std::memcpy(&s2, l0[2].bytes.data(), 4);
    s2 = 1.0f / s2;
    l0[2].bytes = bytes_of(std::vector<float>{s2});
    write_layers(p, kModelOptNvfp4Config, l0, modelopt_nvfp4_layer(m1, w1), w0);
    CHECK(verdict(p) == "inverted_scale");
  }
  SECTION("a scale left stale from older weights: the codes cast with it, the larger values saturated") {
    // Per tensor: the scale of weights 0.6 times as large; a 128x128 block grid the same way.
    Pair per_tensor, block;
    const float stale = 0.6f * block_amax(w0, 0, 0, 256, 256) / 448.0f;
    std::vector<std::uint8_t> codes;
    for (float x : w0.v) codes.push_back(e4m3(x / stale));
    make(per_tensor, kPerTensorConfig,
         {{m0 + ".weight", "F8_E4M3", {256, 256}, bytes_of(codes)},
          {m0 + ".weight_scale", "F32", {1}, bytes_of(std::vector<float>{stale})},
          {m0 + ".input_scale", "F32", {1}, bytes_of(std::vector<float>{0.5f / 448.0f})}});
    CHECK(verdict(per_tensor) == "stale_scale");
    CHECK(weight(checked(per_tensor), m0).codes_at_max > 4);  // the producer's cast puts one there
    Weight older = w0;
    for (float& x : older.v) x *= 0.6f;
    std::vector<StTensor> l0 = deepseek_layer(m0, older);  // the older weights' grid...
    std::vector<float> grid(4);
    std::memcpy(grid.data(), l0[1].bytes.data(), 16);
    codes.clear();
    for (std::int64_t r = 0; r < 256; ++r)  // ...and today's weights cast with it
      for (std::int64_t c = 0; c < 256; ++c) codes.push_back(e4m3(w0.at(r, c) / grid[static_cast<std::size_t>(r / 128 * 2 + c / 128)]));
    l0[0].bytes = bytes_of(codes);
    write_layers(block, kDeepSeekConfig, l0, deepseek_layer(m1, w1), w0);
    CHECK(verdict(block) == "stale_scale");
  }
  SECTION("the codes right, the scale another's: scale_differs, saying the codes are right") {
    Pair p;
    const float s = block_amax(w0, 0, 0, 256, 256) / 448.0f;
    make(p, kPerTensorConfig, per_tensor_layer(m0, w0, 1.25f * s));  // codes cast with s, another scale stored
    CHECK(verdict(p) == "scale_differs");
    const CheckpointReport r = checked(p);
    CHECK(weight(r, m0).findings.back().message.find("the codes are the producer's cast") != std::string::npos);
  }
  SECTION("an E8M0 scale exponent written with a bias off by one: every value doubled") {
    // (E4M3 codes under a doubled scale are the same bytes as FNUZ codes under an OCP label, and
    // read as e4m3_variant above.)
    Pair mx;
    const std::vector<Weight> experts = {random_weight(64, 128, 5), random_weight(64, 128, 6)};
    std::vector<StTensor> gpt = gpt_oss_experts("model.layers.0.mlp.experts.down_proj", experts);
    for (char& b : gpt[1].bytes) b = static_cast<char>(static_cast<std::uint8_t>(b) + 1);  // bias 126 for 127
    write_export(mx.exported(), kGptOssConfig, gpt);
    write_export(mx.reference(), "{}", {gpt_oss_reference("model.layers.0.mlp.experts.down_proj", experts)});
    const CheckpointReport r = checked(mx);
    INFO(findings(r));
    CHECK(r.weights.at(0).verdict == "scale_exponent_bias");
    CHECK(r.weights.at(0).findings.back().message.find("x2") != std::string::npos);
  }
  SECTION("packed FP4 with its nibbles swapped, in both FP4 conventions") {
    Pair nv, mx;
    std::vector<StTensor> l0 = modelopt_nvfp4_layer(m0, w0);
    for (char& b : l0[0].bytes) {
      const auto u = static_cast<std::uint8_t>(b);
      b = static_cast<char>(static_cast<std::uint8_t>(u << 4 | u >> 4));
    }
    write_layers(nv, kModelOptNvfp4Config, l0, modelopt_nvfp4_layer(m1, w1), w0);
    CHECK(verdict(nv) == "swapped_nibbles");
    const std::vector<Weight> experts = {random_weight(64, 128, 5), random_weight(64, 128, 6)};
    std::vector<StTensor> gpt = gpt_oss_experts("model.layers.0.mlp.experts.down_proj", experts);
    for (char& b : gpt[0].bytes) {
      const auto u = static_cast<std::uint8_t>(b);
      b = static_cast<char>(static_cast<std::uint8_t>(u << 4 | u >> 4));
    }
    write_export(mx.exported(), kGptOssConfig, gpt);
    write_export(mx.reference(), "{}", {gpt_oss_reference("model.layers.0.mlp.experts.down_proj", experts)});
    const CheckpointReport r = checked(mx);
    INFO(findings(r));
    CHECK(r.weights.at(0).verdict == "swapped_nibbles");
  }
  SECTION("a weight written [in, out], in every convention: named before any value is compared") {
    auto transpose = [](const Weight& w) {
      Weight t{w.cols, w.rows, {}};
      for (std::int64_t c = 0; c < w.cols; ++c)
        for (std::int64_t r = 0; r < w.rows; ++r) t.v.push_back(w.at(r, c));
      return t;
    };
    const Weight tall = random_weight(384, 256, 21);  // [out, in]; its reference is stored so
    for (const LayerPair& c : std::vector<LayerPair>{
             {"per_tensor_fp8", kPerTensorConfig, per_tensor_layer(m0, transpose(tall)), per_tensor_layer(m1, w1)},
             {"deepseek_fp8_block", kDeepSeekConfig, deepseek_layer(m0, transpose(tall)), deepseek_layer(m1, w1)},
             {"compressed_tensors_fp8", compressed_tensors_config(false), compressed_tensors_layer(m0, transpose(tall), false),
              compressed_tensors_layer(m1, w1, false)},
             {"modelopt_fp8", kModelOptFp8Config, modelopt_fp8_layer(m0, transpose(tall)), modelopt_fp8_layer(m1, w1)},
             {"modelopt_nvfp4", kModelOptNvfp4Config, modelopt_nvfp4_layer(m0, transpose(tall)), modelopt_nvfp4_layer(m1, w1)}}) {
      INFO(c.name);
      Pair p;
      write_layers(p, c.config, c.layer0, c.layer1, tall);
      const CheckpointReport r = checked(p);
      INFO(findings(r));
      CHECK(weight(r, m0).verdict == "transposed_weight");
      CHECK(weight(r, m1).verdict == "matches");
    }
    // gpt-oss: transformers' reference is [E, in, out] itself, so blocks stored [E, in, out/32, 16]
    // match it value for value; config.json's dimensions tell the loader reads [E, out, in/32, 16].
    const std::vector<Weight> experts = {random_weight(64, 128, 5), random_weight(64, 128, 6)};  // [out, in]
    const std::string config = std::string(kGptOssConfig).insert(1, R"("hidden_size":64,"intermediate_size":128,)");
    Pair right, wrong;
    write_export(right.exported(), config, gpt_oss_experts("model.layers.0.mlp.experts.down_proj", experts));
    write_export(right.reference(), "{}", {gpt_oss_reference("model.layers.0.mlp.experts.down_proj", experts)});
    require_all_match(checked(right), 1);
    const std::vector<Weight> flipped = {transpose(experts[0]), transpose(experts[1])};
    write_export(wrong.exported(), config, gpt_oss_experts("model.layers.0.mlp.experts.down_proj", flipped));
    write_export(wrong.reference(), "{}", {gpt_oss_reference("model.layers.0.mlp.experts.down_proj", experts)});
    const CheckpointReport r = checked(wrong);
    INFO(findings(r));
    CHECK(r.weights.at(0).verdict == "transposed_weight");
  }
  SECTION("a static activation scheme without each layer's input_scale, in every convention that has one") {
    const std::string ct_static =
        R"({"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized",)"
        R"("config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel"},)"
        R"("input_activations":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":false}}}}})";
    std::vector<StTensor> ct0 = compressed_tensors_layer(m0, w0, false), ct1 = compressed_tensors_layer(m1, w1, false);
    ct1.push_back({m1 + ".input_scale", "BF16", {1}, bytes_of(std::vector<std::uint16_t>{bf16_bits(0.01f)})});
    for (const LayerPair& c : std::vector<LayerPair>{{"per_tensor_fp8", kPerTensorConfig, per_tensor_layer(m0, w0), per_tensor_layer(m1, w1)},
                                     {"modelopt_fp8", kModelOptFp8Config, modelopt_fp8_layer(m0, w0), modelopt_fp8_layer(m1, w1)},
                                     {"modelopt_nvfp4", kModelOptNvfp4Config, modelopt_nvfp4_layer(m0, w0),
                                      modelopt_nvfp4_layer(m1, w1)},
                                     {"compressed_tensors_fp8", ct_static, ct0, ct1}}) {
      INFO(c.name);
      Pair p;
      std::vector<StTensor> layer0;
      for (const StTensor& t : c.layer0) {
        if (t.name != m0 + ".input_scale") layer0.push_back(t);
      }
      write_layers(p, c.config, layer0, c.layer1, w0);
      const CheckpointReport r = checked(p);
      INFO(findings(r));
      CHECK(weight(r, m0).verdict == "missing_input_scale");
      CHECK(weight(r, m1).verdict == "matches");
      const Result<CheckpointReport> alone = check_checkpoint(p.exported(), "");
      REQUIRE(alone.ok());
      CHECK(weight(alone.value(), m0).verdict == "missing_input_scale");  // no reference needed
    }
    // A dynamic scheme needs none: compressed-tensors' input_activations null.
    Pair dynamic;
    write_pair(dynamic, compressed_tensors_config(false), [](auto m, auto w) { return compressed_tensors_layer(m, w, false); },
               64, 64);
    require_all_match(checked(dynamic), 2);
  }
  SECTION("block scales transposed: the grid of [in, out]") {
    Pair p;
    const Weight tall = random_weight(384, 256, 17);
    std::vector<StTensor> l0 = deepseek_layer(m0, tall);
    std::vector<float> grid(6), moved(6);
    std::memcpy(grid.data(), l0[1].bytes.data(), 24);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 2; ++j) moved[static_cast<std::size_t>(j * 3 + i)] = grid[static_cast<std::size_t>(i * 2 + j)];
    }
    l0[1] = {m0 + ".weight_scale_inv", "F32", {2, 3}, bytes_of(moved)};
    write_layers(p, kDeepSeekConfig, l0, deepseek_layer(m1, w1), tall);
    CHECK(verdict(p) == "transposed_scales");
  }
  SECTION("block scales transposed on a square grid, where only their values tell") {
    Pair p;
    std::vector<StTensor> l0 = deepseek_layer(m0, w0);
    std::vector<float> g(4);
    std::memcpy(g.data(), l0[1].bytes.data(), 16);
    std::swap(g[1], g[2]);
    l0[1].bytes = bytes_of(g);
    write_layers(p, kDeepSeekConfig, l0, deepseek_layer(m1, w1), w0);
    CHECK(verdict(p) == "transposed_scales");
  }
  SECTION("another block size than the config declares") {
    Pair p;
    std::vector<StTensor> l0 = deepseek_layer(m0, w0, 64);
    write_layers(p, kDeepSeekConfig, l0, deepseek_layer(m1, w1), w0);
    CHECK(verdict(p) == "block_size");
  }
  SECTION("the other E4M3: FNUZ codes, labelled so or not") {
    Pair labelled, hidden;
    std::vector<StTensor> l0 = per_tensor_layer(m0, w0);
    l0[0].dtype = "F8_E4M3FNUZ";
    make(labelled, kPerTensorConfig, l0);
    CHECK(verdict(labelled) == "e4m3_variant");
    // An FNUZ producer's codes (bias 8: the OCP bits of twice the value) under an F8_E4M3 label.
    const float s = block_amax(w0, 0, 0, 256, 256) / 224.0f;
    std::vector<std::uint8_t> codes;
    for (float x : w0.v) codes.push_back(e4m3(2.0f * x / s));
    make(hidden, kPerTensorConfig,
         {{m0 + ".weight", "F8_E4M3", {256, 256}, bytes_of(codes)}, {m0 + ".weight_scale", "F32", {1}, bytes_of(std::vector<float>{s})}});
    CHECK(verdict(hidden) == "e4m3_variant");
  }
  SECTION("a weight paired by shape with the wrong reference tensor") {
    Pair p;
    make(p, kPerTensorConfig, per_tensor_layer(m0, w1));  // layer 1's weights under layer 0's name
    CHECK(verdict(p) == "wrong_pairing");
  }
  SECTION("codes that decode to NaN") {
    Pair p;
    std::vector<StTensor> l0 = per_tensor_layer(m0, w0);
    l0[0].bytes[100] = 0x7F;
    make(p, kPerTensorConfig, l0);
    CHECK(verdict(p) == "nonfinite_codes");
  }
  SECTION("a missing scale, and an orphaned one") {
    Pair p;
    std::vector<StTensor> l0 = per_tensor_layer(m0, w0);
    l0.erase(l0.begin() + 1);
    l0.push_back({"model.layers.9.mlp.up_proj.weight_scale", "F32", {1}, bytes_of(std::vector<float>{1.0f})});
    make(p, kPerTensorConfig, l0);
    const CheckpointReport r = checked(p);
    CHECK(weight(r, m0).verdict == "missing_scale");
    REQUIRE_FALSE(r.structure.empty());
    CHECK(r.structure[0].second.code == "orphaned_scale");
  }
  SECTION("a layer the config's ignore list names, stored quantized") {
    Pair p;
    std::vector<StTensor> l0 = per_tensor_layer(m0, w0);
    for (StTensor& t : per_tensor_layer("lm_head", random_weight(32, 256, 3))) l0.push_back(t);
    make(p, kPerTensorConfig, l0);
    const CheckpointReport r = checked(p);
    bool flagged = false;
    for (const auto& [where, f] : r.structure) flagged |= where == "lm_head.weight" && f.code == "ignored_but_quantized";
    CHECK(flagged);
  }
}

TEST_CASE("bad files give an error naming the file and the tensor, never a crash", "[checkpoint]") {
  TempDir dir;
  const std::string good = dir.file("good");
  write_export(good, kPerTensorConfig, per_tensor_layer("m", random_weight(16, 32, 1)), 2);
  auto error_of = [](const std::string& path) {
    Result<CheckpointReport> r = check_checkpoint(path, "");
    REQUIRE_FALSE(r.ok());
    return r.message();
  };
  SECTION("a truncated shard") {
    const std::string shard = good + "/model-00001-of-00002.safetensors";
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 10);
    const std::string e = error_of(good);
    CHECK(e.find(shard) != std::string::npos);
    CHECK(e.find("tensor 'm.weight'") != std::string::npos);
  }
  SECTION("a header that runs past its file") {
    const std::string shard = good + "/model-00002-of-00002.safetensors";
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.put(static_cast<char>(0xFF));
    f.put(static_cast<char>(0xFF));
    f.close();
    const std::string e = error_of(good);
    CHECK(e.find(shard) != std::string::npos);
    CHECK(e.find("truncated: the header size says") != std::string::npos);
  }
  SECTION("an index naming a shard that is not there") {
    std::filesystem::remove(good + "/model-00002-of-00002.safetensors");
    const std::string e = error_of(good);
    CHECK(e.find("model.safetensors.index.json: names shard model-00002-of-00002.safetensors (for tensor") != std::string::npos);
  }
  SECTION("a dtype the format does not have, and a tensor in two shards") {
    write_safetensors(dir.file("odd.safetensors"), {{"w", "F12", {2}, "abc"}});
    CHECK(error_of(dir.file("odd.safetensors")).find("tensor 'w': unsupported dtype F12") != std::string::npos);
    const std::string twice = dir.file("twice");
    std::filesystem::create_directories(twice);
    write_safetensors(twice + "/a.safetensors", {{"w", "F32", {1}, std::string(4, '\0')}});
    write_safetensors(twice + "/b.safetensors", {{"w", "F32", {1}, std::string(4, '\0')}});
    CHECK(error_of(twice).find("tensor 'w' is in") != std::string::npos);
  }
  SECTION("a tensor whose shard the index gets wrong is reported, not fatal") {
    std::ifstream in(good + "/model.safetensors.index.json");
    std::string index((std::istreambuf_iterator<char>(in)), {});
    const auto at = index.find("\"m.weight\":\"model-00001");
    REQUIRE(at != std::string::npos);
    index.replace(at + 18, 5, "00002");
    std::ofstream(good + "/model.safetensors.index.json") << index;
    Result<CheckpointFiles> files = CheckpointFiles::open(good);
    REQUIRE(files.ok());
    REQUIRE(files.value().problems().size() == 1);
    CHECK(files.value().problems()[0].message.find("the index says tensor 'm.weight' is in model-00002") != std::string::npos);
  }
}

TEST_CASE("files from the reference safetensors writer read as a checkpoint", "[checkpoint]") {
  const std::string dir = shared_testdata();
  INFO("the reference writers' files: " << dir);
  REQUIRE(std::filesystem::is_directory(dir));
  Result<CheckpointFiles> shard = CheckpointFiles::open(dir + "/st_fluxml_torch_shard_bf16_f8.safetensors");
  REQUIRE(shard.ok());
  REQUIRE(shard.value().tensors().size() == 3);
  const CheckpointTensor* e4m3 = shard.value().find("float8_e4m3fn_357");
  REQUIRE(e4m3 != nullptr);
  CHECK(std::string(e4m3->entry.dtype->name) == "F8_E4M3");
  CHECK(e4m3->entry.shape == std::vector<std::int64_t>{3, 5, 7});
  Result<MappedTensor> bytes = shard.value().map(*e4m3);
  REQUIRE(bytes.ok());
  CHECK(bytes.value().bytes()[79] == 0x81);  // the README's one subnormal byte
  // FP8 tensors, none named as a weight with its scale: nothing a convention explains.
  CHECK(check_checkpoint(dir + "/st_fluxml_torch_shard_bf16_f8.safetensors", "").message().find("no quantized weight") !=
        std::string::npos);
  // An old writer's header of 526 bytes (not a multiple of 8) reads as well.
  CHECK(CheckpointFiles::open(dir + "/st_hf_pr84_overall_unaligned.safetensors").ok());
}
