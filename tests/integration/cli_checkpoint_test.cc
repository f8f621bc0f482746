// `fp8scope checkpoint` through the real binary, as a CI pipeline gating an export runs it: exit
// 0 for a sharded export that matches its reference, 1 with the broken weight first when a scale
// is inverted, 2 with one line naming the file for bad input; JSON and the HTML page; memory that
// stays at one tensor plus a constant however many tensors the export holds; and --run holding an
// export to the scales a training run streamed to the real daemon ended with.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/vocabulary/recipe_kind.h"
#include "support/checkpoint_exports.h"
#include "support/daemon_samples.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using namespace fp8scope::testing;
using nlohmann::json;

namespace {

const std::string kModule0 = "model.layers.0.mlp.down_proj", kModule1 = "model.layers.1.mlp.down_proj";

ProcessResult checkpoint(std::vector<std::string> args) {
  args.insert(args.begin(), "checkpoint");
  return cli(args, 300.0);
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A DeepSeek-V3 block-FP8 export of `layers` weights of rows x cols in `shards` files, and its
// BF16 reference; layer 0's scale grid inverted when `invert_layer0`.
void write_pair(const TempDir& dir, int layers, std::int64_t rows, std::int64_t cols, int shards, bool invert_layer0) {
  std::vector<StTensor> exported, reference;
  for (int l = 0; l < layers; ++l) {
    const std::string module = "model.layers." + std::to_string(l) + ".mlp.down_proj";
    const Weight w = random_weight(rows, cols, 100 + static_cast<unsigned>(l));
    std::vector<StTensor> layer = deepseek_layer(module, w);
    if (l == 0 && invert_layer0) {
      std::vector<float> grid(layer[1].bytes.size() / 4);
      std::memcpy(grid.data(), layer[1].bytes.data(), layer[1].bytes.size());
      for (float& s : grid) s = 1.0f / s;
      layer[1].bytes = bytes_of(grid);
    }
    exported.insert(exported.end(), layer.begin(), layer.end());
    reference.push_back(bf16_tensor(module + ".weight", w));
  }
  write_export(dir.file("export"), kDeepSeekConfig, exported, shards);
  write_export(dir.file("reference"), "{}", reference, shards);
}

}  // namespace

TEST_CASE("a sharded export that matches its reference passes the gate, and an inverted scale fails it",
          "[checkpoint][cli]") {
  TempDir good, bad;
  write_pair(good, 4, 256, 384, 3, false);
  write_pair(bad, 4, 256, 384, 3, true);

  const ProcessResult ok = checkpoint({good.file("export"), "--reference", good.file("reference"), "--json",
                                       "-o", good.file("report.html")});
  INFO(ok.out << ok.err);
  REQUIRE(ok.exit_code == 0);
  const json j = json::parse(ok.out);
  CHECK(j["convention"] == "deepseek_fp8_block");
  CHECK(j["declared"] == true);
  CHECK_THAT(j["verdict"].get<std::string>(), Catch::StartsWith("export matches its reference: 4 quantized weights"));
  CHECK(j["errors"] == 0);
  REQUIRE(j["weights"].size() == 4);
  for (const json& w : j["weights"]) {
    CHECK(w["verdict"] == "matches");
    CHECK(w["reference"]["cosine"].get<double>() > 0.999);
    CHECK(w["reference"]["codes_differing"] == 0);
  }
  const std::string page = file_text(good.file("report.html"));
  CHECK_THAT(page, Catch::Contains("<html"));
  CHECK_THAT(page, Catch::Contains(kModule1));
  CHECK_THAT(page, Catch::Contains("matches"));

  const ProcessResult broken = checkpoint({bad.file("export"), "--reference", bad.file("reference")});
  INFO(broken.out << broken.err);
  REQUIRE(broken.exit_code == 1);
  // The table is sorted by severity: the broken weight is its first row, diagnosed by name.
  const std::size_t header = broken.out.find("severity");
  REQUIRE(header != std::string::npos);
  const std::size_t first_row = broken.out.find('\n', header) + 1;
  CHECK(broken.out.compare(first_row, 5, "error") == 0);
  CHECK(broken.out.find(kModule0, first_row) < broken.out.find(kModule1, first_row));
  CHECK_THAT(broken.out, Catch::Contains("inverted_scale"));
  CHECK_THAT(broken.out, Catch::Contains("verdict: "));
  // Without the reference the inverted grid is still no valid export of anything: its scales are
  // checked on their own, and the run passes only what can be known.
  const ProcessResult alone = checkpoint({bad.file("export"), "--json"});
  REQUIRE(alone.exit_code <= 1);
  CHECK(json::parse(alone.out)["weights"].size() == 4);
}

TEST_CASE("a static-activation export without a layer's input_scale fails the gate, with or without a reference",
          "[checkpoint][cli]") {
  TempDir dir;
  const Weight w0 = random_weight(64, 96, 3), w1 = random_weight(64, 96, 4);
  std::vector<StTensor> exported = per_tensor_layer(kModule0, w0);
  exported.pop_back();  // the input_scale that activation_scheme "static" needs
  for (const StTensor& t : per_tensor_layer(kModule1, w1)) exported.push_back(t);
  write_export(dir.file("export"), kPerTensorConfig, exported);
  write_export(dir.file("reference"), "{}", {bf16_tensor(std::string(kModule0) + ".weight", w0),
                                             bf16_tensor(std::string(kModule1) + ".weight", w1)});
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, {"--reference", dir.file("reference")}}) {
    std::vector<std::string> args = {dir.file("export")};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = checkpoint(args);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.out, Catch::Contains("missing_input_scale"));
  }
}

TEST_CASE("bad input exits 2 with one line naming the file", "[checkpoint][cli]") {
  TempDir dir;
  write_pair(dir, 2, 128, 128, 2, false);
  const ProcessResult missing = checkpoint({dir.file("nowhere")});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains(dir.file("nowhere")));
  const std::string shard = dir.file("export/model-00002-of-00002.safetensors");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 100);
  const ProcessResult truncated = checkpoint({dir.file("export"), "--reference", dir.file("reference")});
  CHECK(truncated.exit_code == 2);
  CHECK_THAT(truncated.err, Catch::Contains(shard));
  CHECK(std::count(truncated.err.begin(), truncated.err.end(), '\n') == 1);
  const ProcessResult bad_reference = checkpoint({dir.file("reference"), "--reference", dir.file("nowhere")});
  CHECK(bad_reference.exit_code == 2);
}

TEST_CASE("a hostile export is refused with an error naming the file: no crash, no wait, no endless read",
          "[checkpoint][cli][hostile]") {
  TempDir dir;
  write_pair(dir, 2, 128, 128, 2, false);
  const std::string exported = dir.file("export"), config = exported + "/config.json",
                    index = exported + "/model.safetensors.index.json";
  const std::string good_config = file_text(config), good_index = file_text(index);
  // Each case changes the export, is checked, and is undone.
  const auto refused = [&](const std::string& what, const std::string& named) {
    INFO(what);
    const ProcessResult r = checkpoint({exported, "--reference", dir.file("reference")});
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(named));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  };
  const auto replace_with_link = [](const std::string& path, const std::string& target) {
    std::filesystem::remove(path);
    std::filesystem::create_symlink(target, path);
  };
  for (const std::string& file : {config, index}) {
    replace_with_link(file, file);
    refused("a link to itself", file);
    replace_with_link(file, "/dev/zero");
    refused("a link to /dev/zero", file);
    std::filesystem::remove(file);
    REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
    refused("a FIFO", file);
    std::filesystem::remove(file);
    std::ofstream(file) << (file == config ? good_config : good_index);
  }
  // Without an index every .safetensors file is a shard (with one, an unlisted file is only noted).
  std::filesystem::rename(index, index + ".away");
  const std::string shard = exported + "/model-00003-of-00003.safetensors";
  REQUIRE(::mkfifo(shard.c_str(), 0600) == 0);
  refused("a FIFO among the shards", shard);
  std::filesystem::remove(shard);
  std::filesystem::rename(index + ".away", index);
  // quantization_config's fields of the wrong JSON type, and nested 100,000 deep.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& section : {std::string("\"fp8\""), std::string("null"), std::string("{\"quant_method\": 8}"),
                                     std::string("{\"quant_method\": \"fp8\", \"weight_block_size\": \"128\"}"), deep}) {
    std::ofstream(config) << "{\"quantization_config\": " << section << "}";
    refused("quantization_config " + section.substr(0, 40), config);
  }
  std::ofstream(config) << good_config;
  CHECK(checkpoint({exported, "--reference", dir.file("reference")}).exit_code == 0);
}

TEST_CASE("a reference of NaNs gives no verdict: the weight could not be compared", "[checkpoint][cli][hostile]") {
  TempDir dir;
  write_pair(dir, 1, 128, 128, 1, false);
  std::vector<StTensor> nan_reference = {
      {kModule0 + ".weight", "F32", {128, 128}, std::string(128 * 128 * 4, '\xff')}};  // every float 0xffffffff: NaN
  write_export(dir.file("nan-reference"), "{}", nan_reference, 1);
  const ProcessResult r = checkpoint({dir.file("export"), "--reference", dir.file("nan-reference")});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Catch::Contains("unusable_reference"));
  CHECK_THAT(r.out, Catch::Contains("verdict: export not verified"));
  CHECK_THAT(r.out, !Catch::Contains("matches its reference"));
}

TEST_CASE("names from the files are printed escaped: one verdict line, no terminal control",
          "[checkpoint][cli][hostile]") {
  TempDir dir;
  // JSON escapes in the header (write_safetensors writes names as given): a newline and an ESC.
  const std::string forged = "model.layers.0.mlp\\nverdict: FORGED export matches\\u001b[2J.down_proj";
  const Weight w = random_weight(128, 128, 7);
  write_export(dir.file("export"), kDeepSeekConfig, deepseek_layer(forged, w), 1);
  const ProcessResult r = checkpoint({dir.file("export")});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\x1b') == 0);
  std::size_t verdicts = 0;
  for (std::size_t at = 0; (at = r.out.find("\nverdict:", at)) != std::string::npos; ++at) ++verdicts;
  CHECK(verdicts == 1);
  CHECK_THAT(r.out, Catch::Contains("model.layers.0.mlp\\nverdict: FORGED export matches\\x1B[2J.down_proj"));
}

TEST_CASE("a tensor named twice in a header is taken as loaders take it, and said", "[checkpoint][cli][hostile]") {
  TempDir dir;
  const std::vector<StTensor> layer = deepseek_layer(kModule0, random_weight(128, 128, 9));
  write_export(dir.file("export"), kDeepSeekConfig, layer, 1);
  // The header again with the weight's entry given a second time, both over the same bytes.
  const std::string shard = dir.file("export/model.safetensors"), bytes = file_text(shard);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  std::string header = bytes.substr(8, n);
  header.erase(header.find_last_not_of(' ') + 1);
  const std::string key = "\"" + kModule0 + ".weight\":";
  const std::size_t at = header.find(key), end = header.find('}', at) + 1;
  header.insert(header.size() - 1, "," + header.substr(at, end - at));
  while (header.size() % 8) header += ' ';
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  std::ofstream(shard, std::ios::binary) << out << header << bytes.substr(8 + n);
  const ProcessResult r = checkpoint({dir.file("export")});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("repeated_name"));
  CHECK_THAT(r.out, Catch::Contains("tensor '" + kModule0 + ".weight' is named twice"));
}

// Runs fn in a forked child and waits for it. A spawned process's peak RSS (wait4's ru_maxrss)
// starts from the spawning process's own peak, so the big exports are made where this test
// process never holds them.
template <class F>
void in_child(F fn) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    fn();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

TEST_CASE("a multi-shard export checks in memory bounded by one tensor plus a constant", "[checkpoint][cli][memory]") {
  // 1024 x 4096: 4 MiB of codes and 8 MiB of BF16 reference a weight. Eight of them, in four
  // shards, must peak where one does: tensors are mapped one at a time and released.
  constexpr std::int64_t kRows = 1024, kCols = 4096;
  TempDir one, eight;
  in_child([&] { write_pair(one, 1, kRows, kCols, 1, false); });
  in_child([&] { write_pair(eight, 8, kRows, kCols, 4, false); });
  const ProcessResult a = checkpoint({one.file("export"), "--reference", one.file("reference"), "--json"});
  const ProcessResult b = checkpoint({eight.file("export"), "--reference", eight.file("reference"), "--json"});
  INFO(a.err << b.err);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(json::parse(b.out)["weights"].size() == 8);
  struct rusage self {};
  getrusage(RUSAGE_SELF, &self);
  const long tensor_kb = kRows * kCols * 3 / 1024;  // codes and reference of one weight
  INFO("peak RSS: one weight " << a.max_rss_kb << " KiB, eight weights " << b.max_rss_kb << " KiB, one weight's files "
                               << tensor_kb << " KiB, this test process " << self.ru_maxrss << " KiB");
  CHECK(a.max_rss_kb > self.ru_maxrss);  // the figures are the checker's own, not this process's
  CHECK(b.max_rss_kb < a.max_rss_kb + 16 * 1024);
}

namespace {

// A weight's E4M3 codes as TE casts them in training (fp32 x * scale, scale = 448 / amax).
std::vector<std::uint8_t> te_cast(const std::vector<float>& w, float scale) {
  std::vector<std::uint8_t> codes;
  for (float x : w) codes.push_back(e4m3(x * scale));
  return codes;
}


}  // namespace

TEST_CASE("a training run from history holds the export to the scales and codes it ended with", "[checkpoint][cli][history]") {
  constexpr std::int64_t kRows = 64, kCols = 96;
  TempDir dir;
  const std::string data = dir.file("data");
  DaemonProcess daemon(data);
  std::vector<Weight> weights;
  {
    auto train = SampleStream::open(to(daemon), make_hello("ckpt", "train-bf16", 0, 1, 1));
    REQUIRE(train.ok());
    for (int l = 0; l < 3; ++l) weights.push_back(random_weight(kRows, kCols, 40 + static_cast<unsigned>(l)));
    for (std::uint64_t step = 0; step < 2; ++step) {
      for (int l = 0; l < 3; ++l) {
        const std::vector<float>& v = weights[static_cast<std::size_t>(l)].v;
        const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * 4);
        v1::TensorHeader h = f32_header("blocks." + std::to_string(l) + ".mlp.fc1", step, kRows, kCols);
        h.set_operand(v1::OPERAND_W);
        REQUIRE(train.value()->send(h, bytes).ok());
      }
    }
    REQUIRE(train.value()->wait_for_acks(120).ok());
    REQUIRE(train.value()->close().ok());
  }
  // Every layer's both steps stored, under each default recipe: what the check below reads.
  wait_for_records_stored(daemon, 2 * 3 * kDefaultRecipeCount);
  // Per-tensor FP8 as training would cast each weight; layer 2's scale is twice training's.
  auto export_to = [&](const std::string& path, float layer2_factor) {
    std::vector<StTensor> tensors;
    for (int l = 0; l < 3; ++l) {
      const Weight& w = weights[static_cast<std::size_t>(l)];
      const float scale = 448.0f / block_amax(w, 0, 0, kRows, kCols) * (l == 2 ? layer2_factor : 1.0f);
      const std::string module = "blocks." + std::to_string(l) + ".mlp.fc1";
      tensors.push_back({module + ".weight", "F8_E4M3", {kRows, kCols}, bytes_of(te_cast(w.v, scale))});
      tensors.push_back({module + ".weight_scale", "F32", {1}, bytes_of(std::vector<float>{1.0f / scale})});
    }
    write_export(path, R"({"quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic"}})", tensors);
  };
  export_to(dir.file("right"), 1.0f);
  export_to(dir.file("wrong"), 2.0f);

  const ProcessResult r = checkpoint({dir.file("right"), "--run", "train-bf16", "--data-dir", data, "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const json right = json::parse(r.out);
  REQUIRE(right["training"]["weights"].size() == 3);
  CHECK(right["training"]["flagged"] == 0);
  for (const json& w : right["training"]["weights"]) CHECK(w["verdict"] == "matches");

  const ProcessResult wrong = checkpoint({dir.file("wrong"), "--run", "train-bf16", "--data-dir", data, "--json"});
  INFO(wrong.out << wrong.err);
  REQUIRE(wrong.exit_code == 1);
  const json w = json::parse(wrong.out);
  CHECK(w["training"]["flagged"] == 1);
  std::map<std::string, std::string> verdicts;
  for (const json& t : w["training"]["weights"]) verdicts[t["layer"]] = t["verdict"];
  CHECK(verdicts["blocks.2.mlp.fc1"] == "scale differs");
  CHECK(verdicts["blocks.0.mlp.fc1"] == "matches");

  const ProcessResult no_run = checkpoint({dir.file("right"), "--run", "no-such-run", "--data-dir", data});
  CHECK(no_run.exit_code == 2);
  CHECK_THAT(no_run.err, Catch::Contains("no-such-run"));
}
