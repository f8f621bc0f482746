// `fp8scope analyze` through the real binary: JSON Lines equal to the golden files on small
// inputs made here, every real file from the reference writers analyzed or listed as skipped, and
// every kind of bad input answered with one line naming the file and exit code 2.
#include <catch2/catch.hpp>

#include <map>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/process.h"
#include "support/temp_dir.h"

using fp8scope::testing::le_bytes;
using fp8scope::testing::npy_file;
using fp8scope::testing::ProcessResult;
using fp8scope::testing::run_process;
using fp8scope::testing::safetensors_file;
using fp8scope::testing::TempDir;
using nlohmann::json;

namespace {

ProcessResult analyze(std::vector<std::string> args) {
  args.insert(args.begin(), {FP8SCOPE_CLI, "analyze"});
  return run_process(args);
}

std::vector<json> lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// Numbers within 1e-9 relative (sums may round differently on another ISA); everything else exact.
void check_same(const json& expected, const json& actual, const std::string& where) {
  INFO(where);
  if (expected.is_number_float() || actual.is_number_float()) {
    REQUIRE(actual.is_number());
    const double e = expected.get<double>(), a = actual.get<double>();
    CHECK(std::fabs(a - e) <= 1e-9 * std::fabs(e) + 1e-300);
  } else if (expected.is_object()) {
    REQUIRE(actual.is_object());
    for (const auto& [key, value] : actual.items()) {
      if (key != "file") CHECK(expected.contains(key));
    }
    for (const auto& [key, value] : expected.items()) {
      if (key == "seconds" || key == "file") continue;
      REQUIRE(actual.contains(key));
      check_same(value, actual[key], where + "." + key);
    }
  } else if (expected.is_array()) {
    REQUIRE(actual.is_array());
    REQUIRE(expected.size() == actual.size());
    for (std::size_t i = 0; i < expected.size(); ++i) check_same(expected[i], actual[i], where + "[" + std::to_string(i) + "]");
  } else {
    CHECK(expected == actual);
  }
}

// Compares output with tests/golden/NAME; FP8SCOPE_UPDATE_GOLDEN=1 rewrites the file instead.
void check_golden(const std::string& name, const std::string& output) {
  const std::string path = std::string(FP8SCOPE_SOURCE_DIR) + "/tests/golden/" + name;
  if (std::getenv("FP8SCOPE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream golden_out(path);
    for (json line : lines(output)) {
      line.erase("file");  // a temporary path
      golden_out << line.dump() << "\n";
    }
    WARN("rewrote " << path);
  }
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream golden;
  golden << in.rdbuf();
  const std::vector<json> expected = lines(golden.str()), actual = lines(output);
  REQUIRE(expected.size() == actual.size());
  for (std::size_t i = 0; i < expected.size(); ++i) check_same(expected[i], actual[i], name + ":" + std::to_string(i + 1));
}

std::string floats(const std::vector<float>& values) {
  std::string s;
  for (float v : values) s += le_bytes(v);
  return s;
}

// An activation-like 8 x 64 tensor: smooth values with one outlier channel and two tiny ones.
std::vector<float> activation() {
  std::vector<float> v;
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 64; ++c) v.push_back(std::sin(0.37f * static_cast<float>(r * 64 + c)) * (c == 5 ? 900.0f : 1.0f) *
                                             (c == 9 ? 1e-6f : 1.0f));
  return v;
}

}  // namespace

TEST_CASE("analyze --json matches the golden files", "[cli][analyze]") {
  TempDir dir;
  SECTION("an f32 activation with an outlier channel, all recipes") {
    const std::string path = dir.write("activation.npy", npy_file("<f4", false, "(8, 64)", floats(activation())));
    const ProcessResult r = analyze({path, "--json"});
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.empty());
    check_golden("analyze_activation.jsonl", r.out);
  }
  SECTION("a safetensors file with NaN, Inf, zeros and an integer tensor, E5M2 with a stale scale") {
    std::vector<float> g = activation();
    g[3] = NAN;
    g[70] = INFINITY;
    for (int i = 100; i < 140; ++i) g[static_cast<std::size_t>(i)] = 0.0f;
    const std::string header =
        R"({"grad": {"dtype": "F32", "shape": [8, 64], "data_offsets": [0, 2048]},)"
        R"( "step": {"dtype": "I64", "shape": [], "data_offsets": [2048, 2056]}})";
    const std::string path =
        dir.write("grads.safetensors", safetensors_file(header, floats(g) + le_bytes(std::int64_t{12})));
    const ProcessResult r = analyze({path, "--json", "--format", "e5m2", "--scale", "600", "--recipe", "tensor_current",
                                     "--recipe", "tensor_delayed", "--recipe", "mxfp8"});
    REQUIRE(r.exit_code == 0);
    check_golden("analyze_grads_e5m2.jsonl", r.out);
    const std::vector<json> out = lines(r.out);
    CHECK(out.back()["skipped"] == "integer tensor");
    CHECK(out.front()["overflow_ratio"].get<double>() > 0.0);  // scale 600 clips the outlier channel
  }
}

TEST_CASE("mxfp8_2d gives a weight one scale per 32x32 block and an activation MXFP8's 1x32, when --recipe asks for it", "[cli][analyze]") {
  TempDir dir;
  // Small values everywhere but one element of the first 32x32 block: under 2-D blocks its scale
  // flushes the block's other rows too.
  std::vector<float> w(64 * 64);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 1e-3f * static_cast<float>(1 + i % 7);
  w[0] = 3e4f;
  const std::string path = dir.write("w.npy", npy_file("<f4", false, "(64, 64)", floats(w)));
  std::map<std::string, std::map<std::string, double>> underflow;  // operand -> recipe -> ratio
  for (const char* operand : {"w", "x"}) {
    const ProcessResult r = analyze({path, "--json", "--operand", operand, "--recipe", "mxfp8", "--recipe", "mxfp8_2d"});
    REQUIRE(r.exit_code == 0);
    for (const json& line : lines(r.out)) underflow[operand][line["recipe"]] = line["underflow_ratio"].get<double>();
  }
  CHECK(underflow["w"]["mxfp8"] == Approx(31.0 / 4096));       // the first row's block of 32
  CHECK(underflow["w"]["mxfp8_2d"] == Approx(1023.0 / 4096));  // the whole first 32x32 block
  CHECK(underflow["x"]["mxfp8_2d"] == underflow["x"]["mxfp8"]);
}

// x as the raw BF16 bits of a '<u2' .npy (read with --dtype bf16), rounded to nearest even.
std::string bf16_bytes(const std::vector<float>& values) {
  std::string s;
  for (float v : values) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    s += le_bytes(static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16));
  }
  return s;
}

// A 32 x 48 BF16 .npy whose column 0 holds a 64x outlier in one 16-token group: the transform
// spreads it over the group.
std::string outlier_bf16(TempDir& dir) {
  std::vector<float> x(32 * 48);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i));
  x[3 * 48] = 64.0f;
  return dir.write("x.npy", npy_file("<u2", false, "(32, 48)", bf16_bytes(x)));
}

TEST_CASE("nvfp4_rht transforms an activation's and a gradient's column-wise copy but casts a weight as nvfp4",
          "[cli][analyze]") {
  TempDir dir;
  const std::string path = outlier_bf16(dir);
  std::map<std::string, std::map<std::string, json>> rows;  // operand -> recipe -> line
  for (const char* operand : {"x", "dy", "w"}) {
    const ProcessResult r =
        analyze({path, "--json", "--dtype", "bf16", "--operand", operand, "--recipe", "nvfp4", "--recipe", "nvfp4_rht"});
    REQUIRE(r.exit_code == 0);
    for (const json& line : lines(r.out)) rows[operand][line["recipe"]] = line;
  }
  for (const char* operand : {"x", "dy"}) {
    INFO(operand);
    CHECK(rows[operand]["nvfp4_rht"]["mse"] != rows[operand]["nvfp4"]["mse"]);
    CHECK(rows[operand]["nvfp4_rht"]["format"] == "e2m1");
    CHECK(rows[operand]["nvfp4_rht"]["amax"] == rows[operand]["nvfp4"]["amax"]);  // the tensor's own statistics
  }
  CHECK(rows["x"]["nvfp4_rht"]["mse"] == rows["dy"]["nvfp4_rht"]["mse"]);
  CHECK(rows["w"]["nvfp4_rht"]["mse"] == rows["w"]["nvfp4"]["mse"]);
  CHECK(rows["w"]["nvfp4_rht"]["underflow_ratio"] == rows["w"]["nvfp4"]["underflow_ratio"]);
}

TEST_CASE("a what-if TE would refuse is not computed and says TE's reason, and the rest of the tensor's run",
          "[cli][analyze]") {
  TempDir dir;
  std::vector<float> x(32 * 48);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.3f * static_cast<float>(i));
  const std::string path = dir.write("x.npy", npy_file("<f4", false, "(32, 48)", floats(x)));
  // TE's transform takes BF16 input only (pytorch/csrc/quantizer.cpp:2631-2633): an F32 X is refused.
  const ProcessResult r = analyze({path, "--json", "--recipe", "nvfp4", "--recipe", "nvfp4_rht", "--recipe", "nvfp4_te"});
  REQUIRE(r.exit_code == 0);
  std::map<std::string, json> by_recipe;
  for (const json& line : lines(r.out)) by_recipe[line["recipe"]] = line;
  REQUIRE(by_recipe.size() == 3);
  CHECK(by_recipe["nvfp4"].contains("mse"));
  for (const char* refused : {"nvfp4_rht", "nvfp4_te"}) {
    INFO(refused);
    CHECK_FALSE(by_recipe[refused].contains("mse"));
    const std::string why = by_recipe[refused]["not_computed"];
    CHECK(why.find("BF16 input only") != std::string::npos);
    CHECK(why.find("this tensor is f32") != std::string::npos);
  }
  const ProcessResult text = analyze({path, "--recipe", "nvfp4_rht"});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("not computed: nvfp4_rht: TE's random Hadamard transform takes BF16 input only") != std::string::npos);
  // A weight is never transformed, so TE casts it.
  const ProcessResult w = analyze({path, "--json", "--operand", "w", "--recipe", "nvfp4_te"});
  REQUIRE(w.exit_code == 0);
  CHECK(lines(w.out).at(0).contains("mse"));
}

TEST_CASE("nvfp4_te casts the copy the --gemm reads: wgrad's transformed, fprop's and dgrad's as they are",
          "[cli][analyze]") {
  TempDir dir;
  const std::string path = outlier_bf16(dir);
  auto line = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {path, "--json", "--dtype", "bf16"};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = analyze(args);
    REQUIRE(r.exit_code == 0);
    return lines(r.out).at(0);
  };
  CHECK(line({"--recipe", "nvfp4_te", "--gemm", "wgrad"})["mse"] == line({"--recipe", "nvfp4_rht"})["mse"]);
  CHECK(line({"--recipe", "nvfp4_te"})["mse"] == line({"--recipe", "nvfp4"})["mse"]);  // fprop by default
  CHECK(line({"--recipe", "nvfp4_te", "--operand", "dy"})["mse"] == line({"--recipe", "nvfp4_sr", "--operand", "dy"})["mse"]);
  // A GEMM that does not read the operand is bad input.
  const ProcessResult bad = analyze({path, "--dtype", "bf16", "--operand", "w", "--gemm", "wgrad"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--gemm: expected a GEMM that reads w") != std::string::npos);
}

TEST_CASE("NVFP4's options through analyze: 4over6 on X and W, stochastic rounding on Dy, row scaling on X",
          "[cli][analyze]") {
  TempDir dir;
  // Rows many binades apart (tokens of different scale: the smallest blocks' UE4M3 scales underflow
  // under one tensor amax), and column blocks of different amax.
  std::vector<float> x(32 * 48);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.7f * static_cast<float>(i)) * std::exp2(-3.0f * static_cast<float>(i / 48 % 8)) *
           static_cast<float>(1 + i % 48 / 16);
  }
  const std::string path = dir.write("x.npy", npy_file("<f4", false, "(32, 48)", floats(x)));
  std::map<std::string, std::map<std::string, json>> rows;  // operand -> recipe -> line
  for (const char* operand : {"x", "dy", "w"}) {
    const ProcessResult r = analyze({path, "--json", "--operand", operand, "--recipe", "nvfp4", "--recipe",
                                     "nvfp4_4over6", "--recipe", "nvfp4_sr", "--recipe", "nvfp4_row"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    for (const json& line : lines(r.out)) rows[operand][line["recipe"]] = line;
  }
  auto mse = [&](const char* operand, const char* recipe) { return rows[operand][recipe]["mse"].get<double>(); };
  // Each option changes the operands TE applies it to, and leaves the others as nvfp4 casts them.
  CHECK(mse("x", "nvfp4_4over6") != mse("x", "nvfp4"));
  CHECK(mse("w", "nvfp4_4over6") != mse("w", "nvfp4"));
  CHECK(mse("dy", "nvfp4_4over6") == mse("dy", "nvfp4"));
  CHECK(mse("dy", "nvfp4_sr") > mse("dy", "nvfp4"));  // the expected error of a random rounding
  CHECK(mse("x", "nvfp4_sr") == mse("x", "nvfp4"));
  // Under one tensor amax the smallest rows' block scales are UE4M3 zero: their elements are lost
  // to a clipped cast (overflow); under their own rows' amaxes they are not.
  INFO("overflow: nvfp4 " << rows["x"]["nvfp4"]["overflow_ratio"] << ", nvfp4_row " << rows["x"]["nvfp4_row"]["overflow_ratio"]);
  CHECK(rows["x"]["nvfp4"]["overflow_ratio"].get<double>() > 0.1);
  CHECK(rows["x"]["nvfp4_row"]["overflow_ratio"].get<double>() < 0.01);
  CHECK(mse("w", "nvfp4_row") == mse("w", "nvfp4"));
  for (const char* recipe : {"nvfp4_4over6", "nvfp4_sr", "nvfp4_row"}) CHECK(rows["x"][recipe]["format"] == "e2m1");
}

TEST_CASE("every real file from the reference writers is analyzed or listed as skipped", "[cli][analyze]") {
  const std::string dir = fp8scope::testing::shared_testdata();
  INFO("the reference writers' files: " << dir << " (../shared/testdata/real beside the checkout)");
  REQUIRE(std::filesystem::is_directory(dir));
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".npy" && entry.path().extension() != ".safetensors") continue;
    INFO(path);
    const ProcessResult r = analyze({path, "--json"});
    REQUIRE(r.exit_code == 0);
    for (const json& line : lines(r.out)) {
      if (line.contains("skipped")) {
        CHECK(line["dtype"].get<std::string>().find_first_of("IUB") == 0);  // I64, U8, BOOL, ...
      } else {
        CHECK(line["numel"].get<std::int64_t>() > 0);
        CHECK(line.contains("cosine"));
      }
    }
    CHECK(analyze({path}).exit_code == 0);  // and the table
  }
  // The README's reference statistics.
  const ProcessResult r = analyze({dir + "/st_burn_torch_multilayer_f32.safetensors", "--json", "--tensor", "fc1.weight",
                                   "--recipe", "tensor_current"});
  REQUIRE(r.exit_code == 0);
  CHECK(lines(r.out)[0]["amax"].get<double>() == Approx(0.0624892).epsilon(1e-6));
  const ProcessResult nan_inf = analyze({dir + "/npy_npyio_f64_nan_inf.npy", "--json", "--recipe", "tensor_current"});
  REQUIRE(nan_inf.exit_code == 0);
  CHECK(lines(nan_inf.out)[0]["nonfinite"] == 3);
  CHECK(lines(nan_inf.out)[0]["nan"] == 1);
}

TEST_CASE("bad input gets one clear line naming the file, and exit code 2", "[cli][analyze]") {
  TempDir dir;
  const std::string good = npy_file("<f4", false, "(2,)", floats({1, 2}));
  struct Case {
    std::string name, bytes, expect;
    std::vector<std::string> extra;
  };
  const std::vector<Case> cases = {
      {"missing.npy", "", "cannot open", {}},
      {"truncated.npy", good.substr(0, good.size() - 2), "truncated", {}},
      {"header.npy", std::string("\x93NUMPY\x01\x00\x30\x00", 10) + "{'descr': '<f4'", "truncated .npy header", {}},
      {"bytes.safetensors", safetensors_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})", floats({1, 2})),
       "shape x dtype is 16 bytes", {}},
      {"dtype.safetensors", safetensors_file(R"({"w": {"dtype": "F6_E2M3", "shape": [1], "data_offsets": [0, 1]}})", "x"),
       "F6_E2M3 of 1 elements is not a whole number of bytes", {}},
      {"tensor.npy", good, "no tensor named 'nope'", {"--tensor", "nope"}},
      {"empty.npy", npy_file("<f4", false, "(0, 3)", ""), "is empty", {}},
      // --dtype names raw bytes: on a type the file states it would be silently ignored.
      {"typed.npy", good, "--dtype bf16: tensor 'typed' of ", {"--dtype", "bf16"}},
      {"typed.safetensors", safetensors_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                                             floats({1, 2})),
       "is F32, not raw bytes", {"--dtype", "e4m3"}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string path = c.name == "missing.npy" ? dir.file(c.name) : dir.write(c.name, c.bytes);
    std::vector<std::string> args = {path};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const ProcessResult r = analyze(args);
    CHECK(r.exit_code == 2);
    CHECK(r.signal == 0);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find(path) != std::string::npos);
    CHECK(r.err.find(c.expect) != std::string::npos);
  }
  const std::string path = dir.write("ok.npy", good);
  CHECK(analyze({path, "--recipe", "int8"}).exit_code == 2);
  CHECK(analyze({path, "--format", "e3m4"}).exit_code == 2);
  CHECK(analyze({path, "--scale", "-1"}).exit_code == 2);
  CHECK(analyze({path, "--dtype", "f32"}).exit_code == 2);
}

TEST_CASE("all-zero and non-finite tensors are analyzed, not rejected", "[cli][analyze]") {
  TempDir dir;
  const ProcessResult zeros = analyze({dir.write("z.npy", npy_file("<f4", false, "(4,)", floats({0, 0, 0, 0}))), "--json"});
  REQUIRE(zeros.exit_code == 0);
  const json z = lines(zeros.out)[0];
  CHECK(z["cosine"] == 1.0);
  CHECK(z["amin"].is_null());
  CHECK(z["sqnr_db"].is_null());  // lossless: +Inf, which JSON cannot say
  const ProcessResult weird =
      analyze({dir.write("w.npy", npy_file("<f4", false, "(3,)", floats({NAN, INFINITY, 1.0f}))), "--json"});
  REQUIRE(weird.exit_code == 0);
  CHECK(lines(weird.out)[0]["nonfinite"] == 2);
}

TEST_CASE("a job's own codes read with their block scales, from one safetensors file or two", "[cli][analyze]") {
  TempDir dir;
  // MXFP8 codes of a 2 x 64 operand (K = 64: two 1x32 blocks a row): every code 0x7E (448) but
  // one zero, and E8M0 scales 2^-5, 2^-3 (row 0) and 2^0, 2^-127 (row 1).
  std::string codes(128, static_cast<char>(0x7E));
  codes[5] = 0;
  const std::uint8_t compact[4] = {122, 124, 127, 0};
  std::string tiled(512, '\0');  // the 128x4 tile: row r, column c at (r % 32) * 16 + (r / 32) * 4 + c
  tiled[0] = static_cast<char>(compact[0]);
  tiled[1] = static_cast<char>(compact[1]);
  tiled[16] = static_cast<char>(compact[2]);
  tiled[17] = static_cast<char>(compact[3]);
  const std::string file = dir.write(
      "mx.safetensors",
      safetensors_file(R"({"q": {"dtype": "F8_E4M3", "shape": [2, 64], "data_offsets": [0, 128]},)"
                       R"( "q_scales": {"dtype": "F8_E8M0", "shape": [512], "data_offsets": [128, 640]}})",
                       codes + tiled));
  const ProcessResult r = analyze({file, "--tensor", "q", "--scale-layout", "vec32_ue8m0", "--scales", "q_scales", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = lines(r.out)[0];
  CHECK(j["recipe"] == "observed");
  CHECK(j["scale_layout"] == "vec32_ue8m0");
  CHECK(j["amax"] == 448.0);                              // 448 * 2^0
  CHECK(j["amin"] == 448.0 * std::ldexp(1.0, -127));      // 448 * 2^-127
  CHECK(j["saturation_ratio"] == 127.0 / 128.0);
  CHECK(j["zero_ratio"] == 1.0 / 128.0);
  CHECK(j["block_scale_floor_ratio"] == 0.25);            // one block of four at 2^-127
  CHECK(j["scale_min"] == 1.0);                           // the cast multipliers, 1 / scale_inv
  CHECK(j["scale_max"] == std::ldexp(1.0, 127));
  // The same scales kept compact in a file of their own read the same.
  const std::string scales = dir.write(
      "scales.npy", npy_file("|u1", false, "(2, 2)", std::string(reinterpret_cast<const char*>(compact), 4)));
  const ProcessResult c = analyze(
      {file, "--tensor", "q", "--scale-layout", "vec32_ue8m0", "--scales", scales, "--scale-order", "compact", "--json"});
  REQUIRE(c.exit_code == 0);
  CHECK(lines(c.out)[0]["amin"] == j["amin"]);
  // Bad input: one line each.
  for (const auto& [args, expect] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--scale-layout", "vec64"}, "--scale-layout: expected one of scalar_32f, outer_vec_32f"},
           {{"--scale-layout", "vec32_ue8m0"}, "--scale-layout vec32_ue8m0 needs --scales"},
           {{"--scale-layout", "vec128_32f", "--scales", "q_scales"}, "vec128_32f scales of a 2 x 64"},
           {{"--scale-layout", "vec32_ue8m0", "--scales", dir.file("none.npy")}, "--scales: expected a tensor of"}}) {
    std::vector<std::string> argv = {file, "--tensor", "q"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult bad = analyze(argv);
    INFO(bad.err);
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find(expect) != std::string::npos);
    CHECK(std::count(bad.err.begin(), bad.err.end(), '\n') == 1);
  }
}

TEST_CASE("a mistyped command is named with the one probably meant, and --version prints the version", "[cli]") {
  const ProcessResult analyse = run_process({FP8SCOPE_CLI, "analyse", "x.npy"});
  CHECK(analyse.exit_code == 2);
  CHECK(analyse.err.find("fp8scope: unknown command 'analyse'; did you mean 'analyze'?") == 0);
  CHECK(run_process({FP8SCOPE_CLI, "statsu"}).err.find("did you mean 'status'?") != std::string::npos);
  const ProcessResult unknown = run_process({FP8SCOPE_CLI, "xyzzy"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("did you mean") == std::string::npos);  // nothing is close: no guess
  CHECK(unknown.err.find("Commands: analyze status") != std::string::npos);
  const ProcessResult version = run_process({FP8SCOPE_CLI, "--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.out == std::string("fp8scope ") + FP8SCOPE_VERSION + "\n");
}
