// From numbers to decisions through the real binaries, on synthetic runs whose truth is known: an
// FP8 run streams four layers' activations and its loss to fp8scoped; layer blocks.2 gets amax
// jumps at steps 40 and 65, exactly where its loss spikes, and blocks.3 spans more binades than
// FP8 holds. A BF16 baseline logs a clean loss. compare, advise and report must name blocks.2 at
// both spikes, send blocks.3 to BF16, and the report must render in a real headless browser.
// Then an FP8 inference run against its BF16 training run: one weight with the wrong scale, one
// with the right scale but other codes, one training never had; compare must flag exactly those.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "support/daemon_fixture.h"
#include "support/temp_dir.h"
#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/wire/wire.h"

using namespace fp8scope;
using namespace fp8scope::testing;
using nlohmann::json;

namespace {

constexpr int kSteps = 90, kLayers = 4, kRows = 64, kCols = 64;
constexpr std::uint64_t kSpikes[] = {40, 65};
const std::string kCulprit = "blocks.2.mlp.fc1";

double clean_loss(int step, std::mt19937& rng) {
  std::normal_distribution<double> noise(0.0, 0.01);
  return (2.0 + 2.0 * std::exp(-step / 30.0)) * std::exp(noise(rng));
}

// One activation of one layer at one step: unit-scale noise; blocks.2 jumps 2^8 and 2^14 at the
// planted spikes; blocks.3 holds values from 2^-40 to 1 (more binades than any FP8 format).
std::vector<float> activation(int layer, int step, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(kRows * kCols);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = normal(rng);
    if (layer == 3) v[i] = std::ldexp(v[i], -static_cast<int>(i % 41));
  }
  if (layer == 2 && (step == 40 || step == 65)) {
    for (std::size_t i = 0; i < v.size(); i += 97) v[i] *= step == 40 ? 256.0f : 16384.0f;
  }
  return v;
}

v1::TensorHeader header(const std::string& layer, std::uint64_t step, v1::Operand operand, v1::DType dtype) {
  v1::TensorHeader h;
  h.set_step(step);
  h.set_layer(layer);
  h.set_gemm(v1::GEMM_FPROP);
  h.set_operand(operand);
  h.set_dtype(dtype);
  h.add_shape(kRows);
  h.add_shape(kCols);
  return h;
}

template <class T>
std::span<const std::uint8_t> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

void stream_run(const DaemonProcess& d, const std::string& run, bool with_tensors, bool with_spikes) {
  v1::Hello hello = make_hello("insight", run, 0, 1, 1);
  ConnectionOptions to;
  to.endpoint = d.grpc();
  auto stream = SampleStream::open(to, hello);
  REQUIRE(stream.ok());
  std::mt19937 rng(with_spikes ? 11 : 12);
  for (int step = 0; step < kSteps; ++step) {
    if (with_tensors) {
      for (int layer = 0; layer < kLayers; ++layer) {
        const std::vector<float> x = activation(layer, step, rng);
        const v1::TensorHeader h = header("blocks." + std::to_string(layer) + ".mlp.fc1", static_cast<std::uint64_t>(step),
                                          v1::OPERAND_X, v1::DTYPE_F32);
        REQUIRE(stream.value()->send(h, bytes_of(x)).ok());
      }
    }
    double loss = clean_loss(step, rng);
    for (std::uint64_t k : kSpikes) {
      if (with_spikes && static_cast<std::uint64_t>(step) >= k && static_cast<std::uint64_t>(step) < k + 8) {
        loss *= 1.0 + 4.0 * (1.0 - static_cast<double>(static_cast<std::uint64_t>(step) - k) / 8.0);
      }
    }
    REQUIRE(stream.value()->send_scalar(static_cast<std::uint64_t>(step), "loss", loss).ok());
  }
  REQUIRE(stream.value()->wait_for_acks(120).ok());
  REQUIRE(stream.value()->close().ok());
}

struct Fixture {
  TempDir dir;
  std::string data = dir.file("data");
  DaemonProcess daemon{data};
  Fixture() {
    stream_run(daemon, "fp8", true, true);
    stream_run(daemon, "bf16", false, false);
    wait_for_records_stored(daemon, 7u * kSteps * kLayers);  // seven recipes a sample
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

}  // namespace

TEST_CASE("fp8scope log stores a scalar that compare then reads", "[insight]") {
  Fixture& f = fixture();
  for (int step = 0; step < 3; ++step) {
    const ProcessResult log = cli({"log", "--endpoint", f.daemon.grpc(), "--run", "by-hand", "--step",
                                   std::to_string(step), "--value", std::to_string(3.0 - step * 0.1)});
    REQUIRE(log.exit_code == 0);
    CHECK_THAT(log.out, Catch::Contains("logged loss = "));
  }
  REQUIRE(eventually([&] {
    const ProcessResult c = cli({"compare", "--data-dir", f.data, "--run", "by-hand", "--baseline", "bf16", "--json"});
    return c.exit_code == 0 && json::parse(c.out)["run"]["points"] == 3;
  }));
  const ProcessResult bad = cli({"log", "--endpoint", f.daemon.grpc(), "--run", "r", "--step", "1", "--value", "1",
                                 "--name", "has space"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--name"));
}

TEST_CASE("compare finds both planted spikes, calls the FP8 run worse and blames blocks.2 at each", "[insight]") {
  Fixture& f = fixture();
  const ProcessResult c = cli({"compare", "--data-dir", f.data, "--run", "fp8", "--baseline", "bf16", "--json"});
  REQUIRE(c.exit_code == 0);
  const json j = json::parse(c.out);
  REQUIRE(j["run"]["spikes"].size() == 2);
  CHECK(j["run"]["spikes"][0]["start_step"] == kSpikes[0]);
  CHECK(j["run"]["spikes"][1]["start_step"] == kSpikes[1]);
  CHECK(j["baseline"]["spikes"].empty());
  CHECK(j["run_worse"] == true);
  REQUIRE(j["attribution"].size() == 2);
  for (const json& onset : j["attribution"]) {
    REQUIRE_FALSE(onset["suspects"].empty());
    INFO(onset.dump());
    CHECK(onset["suspects"][0]["layer"] == kCulprit);
    CHECK(onset["suspects"][0]["at_step"] == onset["onset_step"]);
    CHECK(onset["suspects"][0]["score"].get<double>() > 3 * onset["suspects"][1]["score"].get<double>());
  }
  const ProcessResult table = cli({"compare", "--data-dir", f.data, "--run", "fp8", "--baseline", "bf16"});
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("verdict: run fp8 is worse than its baseline"));
  CHECK_THAT(table.out, Catch::Contains("spike at step 40: the tensors that moved most\n  1. " + kCulprit));

  const ProcessResult missing = cli({"compare", "--data-dir", f.data, "--run", "nope", "--baseline", "bf16"});
  CHECK(missing.exit_code == 2);
  // ctest runs each case in a process of its own: "by-hand" may or may not be logged yet.
  CHECK_THAT(missing.err, Catch::Contains("runs that have them: bf16, ") && Catch::Contains("fp8)"));
  const ProcessResult no_dir = cli({"compare", "--data-dir", f.dir.file("none"), "--run", "fp8", "--baseline", "bf16"});
  CHECK(no_dir.exit_code == 2);
  CHECK_THAT(no_dir.err, Catch::Contains(f.dir.file("none") + ": no history there (expected fp8scoped's --data-dir"));
  const ProcessResult both = cli({"compare", "--data-dir", f.data, "--endpoint", "127.0.0.1:1", "--run", "fp8",
                                  "--baseline", "bf16"});
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Catch::Contains("--data-dir excludes --endpoint"));
}

TEST_CASE("advise ranks blocks.2 first, rescales it, and sends blocks.3 to BF16 in every format", "[insight]") {
  Fixture& f = fixture();
  const ProcessResult a = cli({"advise", "--data-dir", f.data, "--run", "fp8", "--format", "json"});
  REQUIRE(a.exit_code == 0);
  const json j = json::parse(a.out);
  REQUIRE(j["tensors"].size() == kLayers);
  const json& first = j["tensors"][0];
  CHECK(first["layer"] == kCulprit);
  CHECK(first["spike_blame"] == 2);
  const std::string rec = first["recommendation"];
  CHECK((rec == "current scaling for this tensor" || rec == "raise margin or shorten the history"));
  for (const json& t : j["tensors"]) {
    INFO(t.dump());
    if (t["layer"] == "blocks.3.mlp.fc1") CHECK(t["recommendation"] == "fall back to BF16");
    if (t["layer"] == "blocks.0.mlp.fc1" || t["layer"] == "blocks.1.mlp.fc1") {
      CHECK(t["recommendation"] == "keep FP8");
      CHECK(t["risk"].get<double>() < first["risk"].get<double>());
    }
  }

  const std::string yaml = f.dir.file("te.yaml");
  REQUIRE(cli({"advise", "--data-dir", f.data, "--run", "fp8", "--format", "te-yaml", "-o", yaml}).exit_code == 0);
  // The YAML parses, and each section names its layers by an anchored regex TE's matcher accepts.
  const ProcessResult parsed = run_process(
      {"/usr/bin/python3", "-c",
       "import json, re, sys, yaml; c = yaml.safe_load(open(sys.argv[1])); print(json.dumps(c))", yaml});
  REQUIRE(parsed.exit_code == 0);
  const json config = json::parse(parsed.out);
  // The structure TE's docs define (docs/debug/2_config_file_structure.rst at TE d0067d0, "General
  // Format" and "Layer Specification"): each section has `enabled`, `layers` (a selector) and its
  // features in the `transformer_engine` namespace; every feature is one TE's main branch has
  // (transformer_engine/debug/features/*.py), with only the fields its config check accepts
  // (disable_quantization_gemm.py: gemms; disable_quantization_layer.py:41: enabled only;
  // per_tensor_scaling.py:61-67: gemms/gemms_struct, tensors/tensors_struct).
  const std::map<std::string, std::set<std::string>> te_main_features = {
      {"DisableQuantizationGEMM", {"enabled", "gemms"}},
      {"DisableQuantizationLayer", {"enabled"}},
      {"PerTensorScaling", {"enabled", "gemms", "gemms_struct", "tensors", "tensors_struct"}}};
  bool bf16_layer = false, per_tensor = false;
  for (const auto& [name, section] : config.items()) {
    INFO("section " << name);
    for (const auto& [key, value] : section.items()) {
      CHECK((key == "enabled" || key == "layers" || key == "transformer_engine"));
    }
    CHECK(section["enabled"] == true);
    for (const auto& [selector, value] : section["layers"].items()) {
      CHECK((selector == "layer_name_regex_pattern" || selector == "layer_types"));
    }
    for (const auto& [feature, fields] : section["transformer_engine"].items()) {
      INFO("feature " << feature);
      REQUIRE(te_main_features.count(feature) == 1);
      for (const auto& [field, value] : fields.items()) CHECK(te_main_features.at(feature).count(field) == 1);
    }
    const std::string regex = section["layers"]["layer_name_regex_pattern"];
    const json& te = section["transformer_engine"];
    if (te.contains("DisableQuantizationLayer")) bf16_layer = regex == "^(blocks\\.3\\.mlp\\.fc1)$";
    if (te.contains("PerTensorScaling")) {
      per_tensor = regex == "^(blocks\\.2\\.mlp\\.fc1)$" && te["PerTensorScaling"]["gemms_struct"][0]["gemm"] == "fprop" &&
                   te["PerTensorScaling"]["gemms_struct"][0]["tensors"][0] == "activation";
    }
  }
  CHECK(bf16_layer);
  CHECK((per_tensor || rec == "raise margin or shorten the history"));

  // Features beyond TE's main branch only when asked for by name.
  const ProcessResult asked = cli({"advise", "--data-dir", f.data, "--run", "fp8", "--format", "te-yaml",
                                   "--te-features", "autoswitch_gemm"});
  CHECK(asked.exit_code == 0);
  const ProcessResult unknown = cli({"advise", "--data-dir", f.data, "--run", "fp8", "--format", "te-yaml",
                                     "--te-features", "autoswitch"});
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("autoswitch_gemm"));

  const ProcessResult megatron = cli({"advise", "--data-dir", f.data, "--run", "fp8", "--format", "megatron"});
  REQUIRE(megatron.exit_code == 0);
  CHECK_THAT(megatron.out, Catch::Contains("bf16_layers: [3]"));
  CHECK_THAT(megatron.out, Catch::Contains("--num-layers-at-start-in-bf16 0 --num-layers-at-end-in-bf16 1"));

  const ProcessResult table = cli({"advise", "--data-dir", f.data, "--run", "fp8"});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find(kCulprit) < table.out.find("blocks.0.mlp.fc1"));
  CHECK(cli({"advise", "--data-dir", f.data, "--run", "bf16"}).exit_code == 2);  // it sampled no tensors
}

TEST_CASE("the report names blocks.2 first and renders in headless chromium without console errors", "[insight]") {
  Fixture& f = fixture();
  const std::string html = f.dir.file("report.html");
  const ProcessResult r = cli({"report", "--data-dir", f.data, "--run", "fp8", "--baseline", "bf16", "-o", html,
                               "--progress"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("top tensor: " + kCulprit));
  CHECK_THAT(r.err, Catch::Contains("100% (2520/2520 records)"));
  std::ifstream in(html);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string page = buffer.str();
  // Self-contained: no script, nothing fetched.
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("http://") == page.find("http://www.w3.org/2000/svg"));
  CHECK(page.find("https://") == std::string::npos);
  // The first row of the first attribution table and of the advice table is the culprit.
  const auto attribution = page.find("Tensors that moved at each loss onset");
  const auto advice = page.find("<h2>Advice</h2>");
  REQUIRE(attribution != std::string::npos);
  REQUIRE(advice != std::string::npos);
  CHECK(page.find("<td>blocks.", attribution) == page.find("<td>" + kCulprit + "</td>", attribution));
  CHECK(page.find("<td>blocks.", advice) == page.find("<td>" + kCulprit + "</td>", advice));

  // A real browser: it renders, says nothing on its console, and the screenshot is not blank.
  const std::string profile = f.dir.file("chromium-profile"), shot = f.dir.file("report.png");
  const std::vector<std::string> browser = {"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
                                            "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0",
                                            "--window-size=1400,2400"};
  std::vector<std::string> screenshot = browser;
  screenshot.push_back("--screenshot=" + shot);
  screenshot.push_back("file://" + html);
  const ProcessResult shown = run_process(screenshot, {}, 120);
  INFO(shown.err);
  REQUIRE(shown.exit_code == 0);
  CHECK(shown.err.find(":CONSOLE") == std::string::npos);
  const ProcessResult png = run_process({"/usr/bin/python3", FP8SCOPE_SOURCE_DIR "/tests/support/png_summary.py", shot});
  REQUIRE(png.exit_code == 0);
  std::istringstream summary(png.out);
  int width = 0, height = 0, colours = 0;
  double inked = 0;
  summary >> width >> height >> colours >> inked;
  CHECK(width == 1400);
  CHECK(colours > 50);   // curves, heatmap cells, the risk bars
  CHECK(inked > 0.03);
  std::vector<std::string> dom = browser;
  dom.push_back("--dump-dom");
  dom.push_back("file://" + html);
  const ProcessResult dumped = run_process(dom, {}, 120);
  REQUIRE(dumped.exit_code == 0);
  CHECK(dumped.out.find("<svg") != std::string::npos);
  CHECK(dumped.out.find("overflow ratio, delayed scaling") != std::string::npos);
}

namespace {

// A weight's E4M3 codes as TE casts them: fp32(w * scale), nearest even, satfinite.
std::vector<std::uint8_t> cast_e4m3(const std::vector<float>& w, float scale) {
  std::vector<std::uint8_t> codes;
  for (float x : w) codes.push_back(encode<kE4M3>(mul_rn(x, scale), Saturation::kSatFinite).code);
  return codes;
}

float current_scale_of(const std::vector<float>& w) {
  float amax = 0;
  for (float x : w) amax = std::max(amax, std::fabs(x));
  return 448.0f / amax;
}

}  // namespace

TEST_CASE("compare flags the inference weights whose scale or codes are not training's", "[insight][inference]") {
  TempDir dir;
  const std::string data = dir.file("data");
  DaemonProcess daemon(data);
  ConnectionOptions to;
  to.endpoint = daemon.grpc();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<std::vector<float>> weights(kLayers, std::vector<float>(kRows * kCols));

  // Training, in BF16 (F32 here): three steps of every layer's weight, and one activation of
  // blocks.0 so the daemon's GEMM check compares an FP8 output with the BF16 one.
  {
    auto train = SampleStream::open(to, make_hello("insight", "train-bf16", 0, 1, 1));
    REQUIRE(train.ok());
    for (std::uint64_t step = 0; step < 3; ++step) {
      for (int l = 0; l < kLayers; ++l) {
        for (float& w : weights[l]) w += normal(rng);
        REQUIRE(train.value()->send(header("blocks." + std::to_string(l) + ".mlp.fc1", step, v1::OPERAND_W, v1::DTYPE_F32),
                                    bytes_of(weights[l])).ok());
      }
      const std::vector<float> x = activation(0, static_cast<int>(step), rng);
      REQUIRE(train.value()->send(header("blocks.0.mlp.fc1", step, v1::OPERAND_X, v1::DTYPE_F32), bytes_of(x)).ok());
    }
    REQUIRE(train.value()->wait_for_acks(120).ok());
    REQUIRE(train.value()->close().ok());
  }
  // Inference, in FP8: blocks.0 and .1 exactly as training would cast them; blocks.2 with twice
  // the scale; blocks.3 with the right scale but a weight that is not the trained one; and a head
  // training never sampled.
  {
    auto serve = SampleStream::open(to, make_hello("insight", "serve-fp8", 0, 1, 1));
    REQUIRE(serve.ok());
    for (int l = 0; l <= kLayers; ++l) {
      std::vector<float> w = weights[static_cast<std::size_t>(std::min(l, kLayers - 1))];
      float scale = current_scale_of(w);
      if (l == 2) scale *= 2.0f;
      if (l == 3) w[100] += 0.05f;
      v1::TensorHeader h = header(l == kLayers ? "lm_head" : "blocks." + std::to_string(l) + ".mlp.fc1", 7,
                                  v1::OPERAND_W, v1::DTYPE_E4M3);
      h.set_scale_inv(1.0f / scale);
      REQUIRE(serve.value()->send(h, bytes_of(cast_e4m3(w, scale))).ok());
    }
    REQUIRE(serve.value()->wait_for_acks(120).ok());
    REQUIRE(serve.value()->close().ok());
  }

  json check;
  REQUIRE(eventually([&] {
    const ProcessResult c = cli({"compare", "--data-dir", data, "--run", "serve-fp8", "--baseline", "train-bf16", "--json"});
    if (c.exit_code != 0) return false;
    check = json::parse(c.out)["inference_check"];
    return check["weights"].size() == kLayers + 1 && !check["outputs"].empty();
  }));
  INFO(check.dump(2));
  CHECK(check["flagged"] == 2);
  std::map<std::string, std::string> verdicts;
  for (const json& w : check["weights"]) verdicts[w["layer"]] = w["verdict"];
  CHECK(verdicts["blocks.0.mlp.fc1"] == "matches");
  CHECK(verdicts["blocks.1.mlp.fc1"] == "matches");
  CHECK(verdicts["blocks.2.mlp.fc1"] == "scale differs");
  CHECK(verdicts["blocks.3.mlp.fc1"] == "codes differ");
  CHECK(verdicts["lm_head"] == "not in training");
  for (const json& w : check["weights"]) {
    if (w["layer"] == "blocks.0.mlp.fc1") {
      CHECK(w["training_source"] == "tensor_current");
      CHECK(w["training_step"] == 2);
    }
  }
  // The GEMM check saw training's BF16 pair of blocks.0: its FP8 output error is shown.
  REQUIRE(check["outputs"].size() == 1);
  CHECK(check["outputs"][0]["layer"] == "blocks.0.mlp.fc1");
  CHECK(check["outputs"][0]["training_cosine"].get<double>() > 0.99);
  CHECK(check["outputs"][0]["run_cosine"].is_null());

  const ProcessResult table = cli({"compare", "--data-dir", data, "--run", "serve-fp8", "--baseline", "train-bf16"});
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("the loss is not compared"));
  CHECK_THAT(table.out, Catch::Contains("verdict: 2 of 5 FP8 weights differ from training's"));
  // Against itself, everything matches.
  const ProcessResult same = cli({"compare", "--data-dir", data, "--run", "serve-fp8", "--baseline", "serve-fp8", "--json"});
  REQUIRE(same.exit_code == 0);
  CHECK(json::parse(same.out)["inference_check"]["flagged"] == 0);
  // The report of the inference run carries the same check.
  const std::string html = dir.file("serve.html");
  REQUIRE(cli({"report", "--data-dir", data, "--run", "serve-fp8", "--baseline", "train-bf16", "-o", html}).exit_code == 0);
  std::ifstream in(html);
  std::stringstream page;
  page << in.rdbuf();
  CHECK_THAT(page.str(), Catch::Contains("2 of 5 FP8 weights of run serve-fp8 differ from what training run train-bf16 ended with"));
  CHECK_THAT(page.str(), Catch::Contains("<td>scale differs</td>"));
  // An FP8 run's tensors arrive cast: the heatmaps take the what-ifs from the baseline's.
  CHECK_THAT(page.str(), Catch::Contains("underflow ratio, current scaling (run train-bf16)"));
  CHECK_THAT(page.str(), Catch::Contains("codes at +-max, the job&#39;s own casts (run serve-fp8)"));
}
