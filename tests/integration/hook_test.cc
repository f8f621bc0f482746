// The hook end to end through the real binaries: fp8scoped, `fp8scope run`, libfp8scope_hook.so,
// fp8scope-shipper and tiny_trainer on the CPU fixtures of libcuda/libcublasLt/libcublas. The
// story: the trainer learns; under the hook its losses and the calls reaching cuBLAS are
// unchanged; every layer, GEMM and operand reaches the daemon with the statistics `fp8scope
// analyze` gives for the same tensors; and when the daemon or the shipper dies, or there is no
// daemon at all, training finishes the same and the lost samples are counted.
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "support/daemon_fixture.h"
#include "support/temp_dir.h"

using namespace fp8scope::testing;
using json = nlohmann::json;

namespace {

constexpr int kLayers = 3;
constexpr int kSamplesPerStep = kLayers * 3 * 2;  // three GEMMs per layer, two operands each

ProcessResult trainer(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), FP8SCOPE_TINY_TRAINER);
  return run_process(args, preload_env(std::move(env)), 120.0);
}

// `fp8scope run <run_args> -- tiny_trainer <trainer_args>`.
std::vector<std::string> under_hook(std::vector<std::string> run_args, const std::vector<std::string>& trainer_args) {
  std::vector<std::string> argv = {FP8SCOPE_CLI, "run"};
  argv.insert(argv.end(), run_args.begin(), run_args.end());
  argv.push_back("--");
  argv.push_back(FP8SCOPE_TINY_TRAINER);
  argv.insert(argv.end(), trainer_args.begin(), trainer_args.end());
  return argv;
}

double metric(DaemonProcess& d, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  return metric_value(http_get(d.metrics(), "/metrics"), name, labels);
}

double counter(DaemonProcess& d, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  const double v = metric(d, name, labels);
  return std::isnan(v) ? 0.0 : v;
}

// The (step, value) of every scalar `name` of a run in the daemon's SQLite history.
std::vector<std::pair<long, double>> scalars(const std::string& data_dir, const std::string& run, const std::string& name) {
  std::vector<std::pair<long, double>> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2((data_dir + "/history.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return out;
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(db, "SELECT step, value FROM scalars WHERE run = ? AND name = ? ORDER BY step", -1, &q, nullptr);
  sqlite3_bind_text(q, 1, run.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q, 2, name.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(q) == SQLITE_ROW) out.emplace_back(sqlite3_column_int64(q, 0), sqlite3_column_double(q, 1));
  sqlite3_finalize(q);
  sqlite3_close(db);
  return out;
}

// Each (layer, gemm, operand, step) of a run's records, and the recipes evaluated, in the SQLite history.
std::pair<std::set<std::string>, std::set<std::string>> sampled_tensors(const std::string& data_dir, const std::string& run) {
  std::set<std::string> tensors, recipes;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2((data_dir + "/history.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return {};
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(db, "SELECT layer, gemm, operand, step, recipe FROM records WHERE run = ?", -1, &q, nullptr);
  sqlite3_bind_text(q, 1, run.c_str(), -1, SQLITE_TRANSIENT);
  const auto text = [&](int column) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, column))); };
  while (sqlite3_step(q) == SQLITE_ROW) {
    tensors.insert(text(0) + " " + text(1) + " " + text(2) + " " + std::to_string(sqlite3_column_int64(q, 3)));
    recipes.insert(text(4));
  }
  sqlite3_finalize(q);
  sqlite3_close(db);
  return {tensors, recipes};
}

// The children of a process (the trainer's child is its shipper).
std::vector<int> children_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<int> pids;
  for (int p; in >> p;) pids.push_back(p);
  return pids;
}

}  // namespace

// The block-scaled recipes tiny_trainer trains with, and the scale layout each operand reaches the
// GEMM in (TE's: MXFP8 1x32 E8M0; Float8BlockScaling 1x128 activations and gradients, 128x128
// weights; NVFP4 1x16 UE4M3, 16x16 weights). Row-scaled NVFP4 GEMMs look like NVFP4's to cuBLAS
// but for their alpha: the hook labels their activations' layout (row_scaled_gemm.h).
struct BlockMode {
  const char* mode;
  const char* codes;  // --dtype of the dumped codes
  std::map<std::string, std::string> layout;  // operand -> scale layout
};
const BlockMode kBlockModes[] = {
    {"mxfp8", "e4m3", {{"x", "vec32_ue8m0"}, {"w", "vec32_ue8m0"}, {"dy", "vec32_ue8m0"}}},
    {"block", "e4m3", {{"x", "vec128_32f"}, {"w", "blk128x128_32f"}, {"dy", "vec128_32f"}}},
    {"nvfp4", "e2m1", {{"x", "vec16_ue4m3"}, {"w", "vec16_ue4m3"}, {"dy", "vec16_ue4m3"}}},
    {"nvfp4_row", "e2m1", {{"x", "vec16_ue4m3_row_scaled"}, {"w", "vec16_ue4m3"}, {"dy", "vec16_ue4m3"}}},
};

TEST_CASE("tiny_trainer learns in BF16, FP8, MXFP8, FP8 block scaling and NVFP4, row-scaled too, deterministically",
          "[hook]") {
  TempDir dir;
  for (const std::string mode : {"bf16", "fp8", "mxfp8", "block", "nvfp4", "nvfp4_row"}) {
    INFO(mode);
    const ProcessResult a = trainer({"--steps", "60", "--mode", mode, "--losses", dir.file(mode + "a")});
    const ProcessResult b = trainer({"--steps", "60", "--mode", mode, "--losses", dir.file(mode + "b")});
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    const auto losses = lines_of(dir.file(mode + "a"));
    REQUIRE(losses.size() == 60);
    CHECK(losses == lines_of(dir.file(mode + "b")));
    CHECK(std::stod(losses.back()) < 0.5 * std::stod(losses.front()));
  }
}

TEST_CASE("under the hook, losses and the calls reaching cuBLAS are unchanged", "[hook]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::vector<std::string> modes = {"bf16", "fp8", "mxfp8", "block", "nvfp4"};
  for (const std::string& mode : modes) {
    INFO(mode);
    const ProcessResult plain = trainer({"--steps", "12", "--mode", mode, "--losses", dir.file(mode + ".plain")},
                                        {"FP8SCOPE_FIXTURE_TRACE=" + dir.file(mode + ".plain.trace")});
    const ProcessResult hooked = run_process(
        under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "same"},
                   {"--steps", "12", "--mode", mode, "--losses", dir.file(mode + ".hooked")}),
        preload_env({"FP8SCOPE_FIXTURE_TRACE=" + dir.file(mode + ".hooked.trace")}), 120.0);
    REQUIRE(plain.exit_code == 0);
    REQUIRE(hooked.exit_code == 0);
    CHECK(lines_of(dir.file(mode + ".plain")) == lines_of(dir.file(mode + ".hooked")));
    const auto trace = lines_of(dir.file(mode + ".plain.trace"));
    CHECK(trace.size() == 12 * kLayers * 3 + (mode == "bf16" ? 12 * kLayers : 0));  // cublasGemmEx also reaches Lt
    CHECK(trace == lines_of(dir.file(mode + ".hooked.trace")));
  }
  // Every GEMM of every step was sampled once (cublasGemmEx's inner cublasLtMatmul is not).
  const double samples = static_cast<double>(modes.size() * 12 * kSamplesPerStep);
  CHECK(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == samples; }));
  CHECK(counter(daemon, "fp8scope_samples_total") == samples);
}

TEST_CASE("fp8scope run returns once the job's samples are stored: history right after it holds every one",
          "[hook][history]") {
  // The shipper outlives the trainer, sending what its ring still holds; run waits for it and for
  // the daemon's writes, so the README's `run` then `history` sees the whole job, every time.
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string run_name = "stored-" + std::to_string(attempt);
    const ProcessResult run = run_process(
        under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "stored", "--run", run_name}, {"--steps", "8"}),
        preload_env(), 120.0);
    INFO(run.err);
    REQUIRE(run.exit_code == 0);
    CHECK(run.err.find("not stored yet") == std::string::npos);
    CHECK(sampled_tensors(dir.file("data"), run_name).first.size() == static_cast<std::size_t>(8 * kSamplesPerStep));
  }
  // --store-wait 0 returns with the job, as before.
  const ProcessResult quick = run_process(
      under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "stored", "--run", "quick", "--store-wait", "0"},
                 {"--steps", "2"}),
      preload_env(), 120.0);
  CHECK(quick.exit_code == 0);
}

TEST_CASE("block-scaled FP8 and NVFP4 operands arrive with their scales and read as analyze reads their dumps",
          "[hook][block]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::map<std::string, std::vector<std::string>> operands = {
      {"fprop", {"x", "w"}}, {"dgrad", {"w", "dy"}}, {"wgrad", {"x", "dy"}}};
  double expected_samples = 0;
  for (const BlockMode& m : kBlockModes) {
    INFO(m.mode);
    const std::string dump = dir.file(std::string("dump-") + m.mode);
    std::filesystem::create_directories(dump);
    const ProcessResult run = run_process(
        under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--job", m.mode, "--run", m.mode},
                   {"--steps", "8", "--mode", m.mode, "--dump-step", "5", "--dump-dir", dump}),
        preload_env(), 120.0);
    REQUIRE(run.exit_code == 0);
    expected_samples += 2 * kSamplesPerStep;
    REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == expected_samples; }));
    const std::string metrics = http_get(daemon.metrics(), "/metrics");
    for (int l = 0; l < kLayers; ++l) {
      for (const auto& [gemm, ops] : operands) {
        for (const std::string& op : ops) {
          const std::string base = dump + "/mlp." + std::to_string(l) + "." + gemm + "." + op;
          INFO(base << " " << m.layout.at(op));
          const ProcessResult analyze = cli({"analyze", base + ".npy", "--dtype", m.codes, "--json", "--scale-layout",
                                             m.layout.at(op), "--scales", base + ".scales.npy"});
          REQUIRE(analyze.exit_code == 0);
          const json expected = json::parse(analyze.out);
          const std::map<std::string, std::string> tensor = {
              {"job", m.mode}, {"layer", "mlp." + std::to_string(l) + "#0"}, {"gemm", gemm}, {"operand", op}};
          std::map<std::string, std::string> observed = tensor;
          observed["format"] = m.codes;
          observed["recipe"] = "observed";
          for (const char* key : {"saturation_ratio", "block_scale_floor_ratio", "block_scale_ceiling_ratio",
                                  "max_block_dynamic_range_log2"}) {
            INFO(key);
            CHECK(metric_value(metrics, std::string("fp8scope_") + key, observed) ==
                  Approx(expected[key].get<double>()).epsilon(1e-12));
          }
          for (const char* key : {"zero_ratio", "dynamic_range_log2"}) {
            INFO(key);
            CHECK(metric_value(metrics, std::string("fp8scope_") + key, tensor) ==
                  Approx(expected[key].get<double>()).epsilon(1e-12));
          }
          // NVFP4 codes from a GEMM alone: the per-tensor factor is folded into the GEMM's alpha
          // with the other operand's, so the figures in the tensor's unit are only relative; the
          // daemon exports no series for them, and analyze says so without --scale-inv.
          const bool relative = m.layout.at(op).rfind("vec16_ue4m3", 0) == 0;
          CHECK(expected["value_units"] == (relative ? "relative" : "real"));
          for (const char* key : {"amax", "amin", "mean"}) {
            INFO(key);
            if (relative) {
              CHECK(std::isnan(metric_value(metrics, std::string("fp8scope_") + key, tensor)));  // absent
            } else {
              CHECK(metric_value(metrics, std::string("fp8scope_") + key, tensor) ==
                    Approx(expected[key].get<double>()).epsilon(1e-12));
            }
          }
          CHECK(metric_value(metrics, "fp8scope_last_step", tensor) == 5.0);
        }
      }
    }
  }
  // Nothing was dropped: every scale mode and FP4 was read.
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
  // The history keeps each observed record's layout and its scale histogram.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2((dir.file("data") + "/history.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  REQUIRE(eventually([&] {
    sqlite3_stmt* q = nullptr;
    sqlite3_prepare_v2(db,
                       "SELECT COUNT(DISTINCT scale_layout), COUNT(*) FROM records WHERE recipe = 'observed' AND "
                       "scale_layout IS NOT NULL AND length(scale_histogram) > 0",
                       -1, &q, nullptr);
    const bool done = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) == 5 &&  // the 5 layouts above
                      sqlite3_column_int64(q, 1) == static_cast<sqlite3_int64>(expected_samples);
    sqlite3_finalize(q);
    return done;
  }));
  // Each NVFP4 record says its values are relative, and no other does.
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db,
                             "SELECT job, COUNT(*) FROM records WHERE value_units = 'relative' GROUP BY job ORDER BY job",
                             -1, &q, nullptr) == SQLITE_OK);
  std::map<std::string, sqlite3_int64> relative;
  while (sqlite3_step(q) == SQLITE_ROW) relative[reinterpret_cast<const char*>(sqlite3_column_text(q, 0))] = sqlite3_column_int64(q, 1);
  sqlite3_finalize(q);
  CHECK(relative == std::map<std::string, sqlite3_int64>{{"nvfp4", 2 * kSamplesPerStep}, {"nvfp4_row", 2 * kSamplesPerStep}});
  // TE's log gets the figures that hold whatever the factor, and no line for those it would write
  // in real units; the table says the MSE is relative.
  const ProcessResult log = cli({"history", "--endpoint", daemon.grpc(), "--run", "nvfp4", "--format", "nvdlfw"});
  REQUIRE(log.exit_code == 0);
  CHECK(log.out.find("mlp.1_activation_nvfp4_underflows%") != std::string::npos);
  CHECK(log.out.find("mlp.1_activation_dynamic_range") != std::string::npos);
  for (const char* unknown : {"_cur_amax", "_mean", "_nvfp4_mse", "_l2_norm"}) CHECK(log.out.find(unknown) == std::string::npos);
  const ProcessResult table = cli({"history", "--endpoint", daemon.grpc(), "--run", "nvfp4", "--recipe", "observed"});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find(" relative ") != std::string::npos);
  sqlite3_close(db);
}

TEST_CASE("advise and report judge an NVFP4 job by the NVFP4 what-ifs of its BF16 baseline and draw its block scales",
          "[hook][block]") {
  TempDir dir;
  const std::string data = dir.file("data");
  DaemonProcess daemon(data);
  for (const char* mode : {"bf16", "nvfp4"}) {
    REQUIRE(run_process(under_hook({"--endpoint", daemon.grpc(), "--every", "2", "--job", "study", "--run", mode},
                                   {"--steps", "8", "--mode", mode}),
                        preload_env(), 120.0)
                .exit_code == 0);
  }
  // Every sample of both runs analyzed: 4 sampled steps each.
  REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == 2 * 4 * kSamplesPerStep; }));
  json advice;
  REQUIRE(eventually([&] {
    const ProcessResult a = cli({"advise", "--data-dir", data, "--run", "nvfp4", "--baseline", "bf16", "--format", "json"});
    if (a.exit_code != 0) return false;
    advice = json::parse(a.out);
    return advice["tensors"].size() == static_cast<std::size_t>(kSamplesPerStep);
  }));
  for (const json& t : advice["tensors"]) {
    INFO(t.dump());
    CHECK(t["what_if_recipe"] == "nvfp4");
    CHECK(t["what_if_source"] == "bf16");
    CHECK(t["observed_layout"] == "vec16_ue4m3");
    CHECK(t["lagging_share"].is_null());  // block scales do not lag
    CHECK_FALSE(t.contains("replay"));
  }
  // The recipe each of the 9 GEMMs can take, judged on the baseline's BF16 what-ifs.
  const json& ladder = advice["recipe_ladder"];
  REQUIRE(ladder["gemms"].size() == 9);
  std::size_t fp4 = 0;
  for (const json& g : ladder["gemms"]) {
    INFO(g.dump());
    CHECK(std::set<std::string>{"nvfp4", "mxfp8", "tensor_current", "bf16"}.count(g["recipe"]) == 1);
    CHECK(g["operands"].size() == 2);
    CHECK_FALSE(g["evidence"].get<std::string>().empty());
    fp4 += g["recipe"] == "nvfp4";
  }
  CHECK(ladder["fp4_ready"] == fp4);
  CHECK(ladder["fp4_share"].get<double>() == Approx(static_cast<double>(fp4) / 9.0));
  const ProcessResult table = cli({"advise", "--data-dir", data, "--run", "nvfp4", "--baseline", "bf16"});
  CHECK_THAT(table.out, Catch::Contains(std::to_string(fp4) + " of 9 GEMMs"));
  // The same ladder as TE's CustomRecipe, loaded against the TE stand-in and held to TE's rules.
  REQUIRE(cli({"advise", "--data-dir", data, "--run", "nvfp4", "--baseline", "bf16", "--format", "te-recipe", "-o",
               dir.file("recipe.py")})
              .exit_code == 0);
  // It writes the table's advice, not the ladder's rungs: the NVFP4 run's own recipe for the GEMMs
  // the table keeps, and for every GEMM not sampled (never a rung no sample stood on).
  const json& te_recipe = advice["te_recipe"];
  CHECK(te_recipe["fallback"] == "nvfp4");
  json plan = {{"gemms", json::object()}, {"fallback", te_recipe["fallback"]}};
  std::map<std::string, std::set<std::string>> advised;  // layer gemm -> the tensors' recommendations
  for (const json& t : advice["tensors"]) advised[t["layer"].get<std::string>() + " " + t["gemm"].get<std::string>()].insert(t["recommendation"]);
  REQUIRE(te_recipe["gemms"].size() == advised.size());
  for (const json& g : te_recipe["gemms"]) {
    const std::string layer = g["layer"];
    plan["gemms"][layer.substr(0, layer.rfind('#'))][g["gemm"].get<std::string>()] = g["recipe"];
    const std::set<std::string>& r = advised[layer + " " + g["gemm"].get<std::string>()];
    INFO(g.dump());
    if (r.count("fall back to BF16")) CHECK(g["recipe"] == "bf16");
    else if (r == std::set<std::string>{"keep FP8"}) CHECK(g["recipe"] == "nvfp4");
  }
  std::ofstream(dir.file("plan.json")) << plan.dump();
  const ProcessResult checked = run_process({FP8SCOPE_PYTHON, std::string(FP8SCOPE_SOURCE_DIR) + "/tests/support/te_custom_recipe_check.py",
                                             dir.file("recipe.py"), dir.file("plan.json")});
  INFO(checked.out << checked.err);
  CHECK(checked.exit_code == 0);
  const std::string html = dir.file("report.html");
  REQUIRE(cli({"report", "--data-dir", data, "--run", "nvfp4", "--baseline", "bf16", "-o", html}).exit_code == 0);
  std::ifstream in(html);
  const std::string page{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  CHECK_THAT(page, Catch::Contains("underflow ratio, the job&#39;s recipe (nvfp4) (run bf16)"));
  CHECK_THAT(page, Catch::Contains("block scales at the scale format&#39;s floor, the job&#39;s own (run nvfp4)"));
  CHECK_THAT(page, Catch::Contains("vec16_ue4m3 block scales)"));
  CHECK_THAT(page, Catch::Contains("largest block scale"));
  CHECK_THAT(page, !Catch::Contains("overflow ratio, delayed scaling"));  // no per-tensor tensor to draw it for
}

TEST_CASE("an input channel that grows step by step warns ahead of the planted loss spike, in compare and the report",
          "[hook][warnings]") {
  TempDir dir;
  const std::string data = dir.file("data");
  DaemonProcess daemon(data);
  // From step 20 input feature 1 grows 8% a step; at step 45 feature 0 is 30x out: the loss
  // spikes 8x there and recovers. The baseline is the same job without either.
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"base", {"--steps", "60", "--mode", "bf16"}},
      {"grow",
       {"--steps", "60", "--mode", "bf16", "--channel-growth-from", "20", "--channel-growth", "1.08", "--outlier-step",
        "45", "--outlier-scale", "30"}}};
  for (const auto& [run, args] : runs) {
    REQUIRE(run_process(under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "warn", "--run", run}, args),
                        preload_env(), 120.0)
                .exit_code == 0);
  }
  REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == 2 * 60 * kSamplesPerStep; }));
  json compare;
  REQUIRE(eventually([&] {
    const ProcessResult c = cli({"compare", "--data-dir", data, "--run", "grow", "--baseline", "base", "--json"});
    if (c.exit_code != 0) return false;
    compare = json::parse(c.out);
    return compare.contains("attribution") && !compare["attribution"].empty();
  }));
  INFO(compare.dump());
  const json* spike = nullptr;
  for (const json& a : compare["attribution"]) {
    if (a["onset_step"] == 45) spike = &a;
  }
  REQUIRE(spike != nullptr);
  // The first layer's X (fprop and wgrad read the same batch) holds the growing column: its
  // channel ratio had risen well ahead of the spike, and stood far above its baseline.
  const json* lead = nullptr;
  for (const json& w : (*spike)["warnings"]) {
    if (w["layer"] == "mlp.0#0" && w["operand"] == "x" && w["signal"] == "channel_amax_ratio" && lead == nullptr) lead = &w;
  }
  REQUIRE(lead != nullptr);
  CHECK((*lead)["steps_ahead"].get<int>() >= 10);
  CHECK((*lead)["first_step"].get<int>() > 20);
  CHECK((*lead)["before_onset"].get<double>() > 3 * (*lead)["baseline"].get<double>());
  const ProcessResult table = cli({"compare", "--data-dir", data, "--run", "grow", "--baseline", "base"});
  CHECK_THAT(table.out, Catch::Contains("early warnings that had risen before it:\n  - mlp.0#0"));
  const std::string html = dir.file("report.html");
  REQUIRE(cli({"report", "--data-dir", data, "--run", "grow", "--baseline", "base", "-o", html}).exit_code == 0);
  std::ifstream in(html);
  const std::string page{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  CHECK_THAT(page, Catch::Contains("Early warnings that had risen before it"));
  CHECK_THAT(page, Catch::Contains("channel_amax_ratio"));
}

TEST_CASE("every layer, GEMM and operand reaches the daemon with the statistics analyze gives", "[hook]") {
  TempDir dir;
  std::vector<std::string> daemon_args;
  bool shared = true;
  SECTION("copied by the daemon out of the hook's ring (shared memory, the default on one host)") {}
  SECTION("streamed through the socket (--shared-memory-socket off)") {
    daemon_args = {"--shared-memory-socket", "off"};
    shared = false;
  }
  DaemonProcess daemon(dir.file("data"), daemon_args);
  std::filesystem::create_directories(dir.file("dump"));
  const ProcessResult run = run_process(
      under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--job", "stats", "--run", "bf16-1"},
                 {"--steps", "8", "--losses", dir.file("losses"), "--dump-step", "5", "--dump-dir", dir.file("dump")}),
      preload_env(), 120.0);
  REQUIRE(run.exit_code == 0);
  CHECK(run.err.find("job stats, run bf16-1") != std::string::npos);
  REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == 2 * kSamplesPerStep; }));
  const double received = counter(daemon, "fp8scope_received_bytes_total");
  CHECK(received > 0);
  CHECK(counter(daemon, "fp8scope_shared_memory_bytes_total") == (shared ? received : 0.0));
  CHECK(run.err.find("streaming samples instead") == std::string::npos);
  const std::map<std::string, std::vector<std::string>> operands = {
      {"fprop", {"x", "w"}}, {"dgrad", {"w", "dy"}}, {"wgrad", {"x", "dy"}}};
  const std::string metrics = http_get(daemon.metrics(), "/metrics");
  for (int l = 0; l < kLayers; ++l) {
    for (const auto& [gemm, ops] : operands) {
      for (const std::string& op : ops) {
        const std::string file = dir.file("dump") + "/mlp." + std::to_string(l) + "." + gemm + "." + op + ".npy";
        const std::string format = op == "dy" ? "e5m2" : "e4m3";
        INFO(file);
        const ProcessResult analyze = cli({"analyze", file, "--dtype", "bf16", "--json", "--recipe", "tensor_current",
                                           "--format", format});
        REQUIRE(analyze.exit_code == 0);
        const json expected = json::parse(analyze.out);
        const std::map<std::string, std::string> labels = {{"job", "stats"},     {"layer", "mlp." + std::to_string(l) + "#0"},
                                                           {"gemm", gemm},       {"operand", op},
                                                           {"format", format},   {"recipe", "tensor_current"}};
        CHECK(metric_value(metrics, "fp8scope_mse", labels) == Approx(expected["mse"].get<double>()).epsilon(1e-12));
        CHECK(metric_value(metrics, "fp8scope_cosine_similarity", labels) ==
              Approx(expected["cosine"].get<double>()).epsilon(1e-12));
        CHECK(metric_value(metrics, "fp8scope_underflow_ratio", labels) == expected["underflow_ratio"].get<double>());
        CHECK(metric_value(metrics, "fp8scope_last_step",
                           {{"job", "stats"}, {"layer", labels.at("layer")}, {"gemm", gemm}, {"operand", op}}) == 5.0);
      }
    }
  }
  // The trainer's losses, logged through fp8scope_log_scalar, are in the run's history.
  const auto losses = lines_of(dir.file("losses"));
  REQUIRE(eventually([&] { return scalars(dir.file("data"), "bf16-1", "loss").size() == losses.size(); }));
  const auto stored = scalars(dir.file("data"), "bf16-1", "loss");
  for (std::size_t i = 0; i < losses.size(); ++i) CHECK(stored[i].second == std::stod(losses[i]));
}

TEST_CASE("FP8 operands arrive as codes with the scale_inv their GEMM used", "[hook]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const ProcessResult run = run_process(
      under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "fp8"}, {"--steps", "6", "--mode", "fp8"}),
      preload_env(), 120.0);
  REQUIRE(run.exit_code == 0);
  REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == 6 * kSamplesPerStep; }));
  // The run's --every became job fp8's own policy; jobs without one keep the default.
  CHECK(run.err.find("job fp8 samples with a policy of its own") != std::string::npos);
  CHECK(cli({"policy", "get", "--endpoint", daemon.grpc()}).out.find("every_n_steps 10\n") != std::string::npos);
  CHECK(cli({"policy", "get", "--endpoint", daemon.grpc(), "--job", "fp8"}).out.find("every_n_steps 1\n") !=
        std::string::npos);
  for (const auto& [gemm, op, format] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"fprop", "x", "e4m3"}, {"fprop", "w", "e4m3"}, {"dgrad", "dy", "e5m2"}, {"wgrad", "dy", "e5m2"}}) {
    INFO(gemm << " " << op);
    const double observed = metric(daemon, "fp8scope_scale",
                                   {{"job", "fp8"}, {"layer", "mlp.1#0"}, {"gemm", gemm}, {"operand", op},
                                    {"format", format}, {"recipe", "observed"}});
    // Delayed scaling's scale is the format's max over an earlier amax: positive and finite.
    CHECK(observed > 0.0);
    CHECK(std::isfinite(observed));
  }
}

TEST_CASE("a TE debug-API config drives what is sampled: its layers, tensors and steps, section by section",
          "[hook]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  // TE's rules: freq counts from step 0 and end_step is inclusive (features/utils/__init__.py:36-68);
  // a start_end_list's pairs are inclusive; layer_numbers reads the name's one number.
  std::ofstream(dir.file("te.yaml")) << R"(first_layer_activations:
  enabled: True
  layers:
    layer_numbers: [0]
  transformer_engine:
    LogFp8TensorStats:
      enabled: True
      tensors: [activation]
      stats: [underflows%, mxfp8_mse]
      freq: 3
      start_step: 1
      end_step: 7
    FakeQuant:
      enabled: True
      gemms: [fprop]
      tensors: [activation]
      quant_format: FP8E5M2
later_gradients:
  enabled: True
  layers:
    layer_name_regex_pattern: 'mlp\.[1-9]'
  transformer_engine:
    LogTensorStats:
      enabled: True
      tensors_struct:
        - tensor: gradient
          stats: [cur_amax]
          start_end_list: [[2, 2], [5, 6]]
)";
  const ProcessResult run = run_process(
      under_hook({"--endpoint", daemon.grpc(), "--te-config", dir.file("te.yaml"), "--job", "te", "--run", "te-1"},
                 {"--steps", "10"}),
      preload_env(), 120.0);
  REQUIRE(run.exit_code == 0);
  CHECK(run.err.find("FakeQuant: changes the job's numerics: not applied") != std::string::npos);
  std::set<std::string> expected;
  for (int step : {3, 6}) expected.insert("mlp.0#0 fprop x " + std::to_string(step));
  for (int layer : {1, 2}) {
    for (int step : {2, 5, 6}) expected.insert("mlp." + std::to_string(layer) + "#0 dgrad dy " + std::to_string(step));
  }
  // Recipes: what the stats name (mxfp8), and the job's own cast of its FP8 data; nothing else.
  const std::set<std::string> recipes = {"mxfp8"};
  REQUIRE(eventually([&] { return sampled_tensors(dir.file("data"), "te-1").first.size() >= expected.size(); }));
  CHECK(sampled_tensors(dir.file("data"), "te-1").first == expected);
  CHECK(sampled_tensors(dir.file("data"), "te-1").second == recipes);
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
  const std::string policy = cli({"policy", "get", "--endpoint", daemon.grpc(), "--job", "te"}).out;
  CHECK(policy.find("every=3\tphase=0\tstart=1\tend=8\ttensors=fprop:x\tgroup=1") != std::string::npos);
  CHECK(policy.find("ranges=2-3,5-7\ttensors=dgrad:dy\tgroup=2\tlayers=mlp\\.[1-9]") != std::string::npos);
}

TEST_CASE("steps come from the repeat of the first GEMM when the job does not say", "[hook]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const ProcessResult run = run_process(
      under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--job", "steps"}, {"--steps", "12", "--no-step-api"}),
      preload_env(), 120.0);
  REQUIRE(run.exit_code == 0);
  REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == 3 * kSamplesPerStep; }));
  CHECK(metric(daemon, "fp8scope_last_step", {{"job", "steps"}, {"layer", "mlp.2#0"}, {"gemm", "wgrad"}, {"operand", "dy"}}) ==
        10.0);
}

TEST_CASE("the daemon killed mid-run and restarted: same losses, the hook reconnects, drops are counted", "[hook]") {
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(free_port());
  REQUIRE(trainer({"--steps", "60", "--losses", dir.file("reference")}).exit_code == 0);
  auto daemon = std::make_unique<DaemonProcess>(dir.file("data"), std::vector<std::string>{}, listen);
  ChildProcess run(under_hook({"--endpoint", listen, "--every", "1", "--job", "kill"},
                              {"--steps", "60", "--step-sleep-ms", "60", "--losses", dir.file("losses")}),
                   preload_env(), dir.file("run.log"));
  REQUIRE(eventually([&] { return counter(*daemon, "fp8scope_samples_total") >= kSamplesPerStep; }));
  daemon->stop(SIGKILL, 10.0);
  // The shipper has found the daemon gone: what it drains until it reconnects is dropped.
  REQUIRE(eventually([&] {
    const std::vector<std::string> log = lines_of(dir.file("run.log"));
    return std::any_of(log.begin(), log.end(), [](const std::string& l) {
      return l.find("fp8scope-shipper: lost fp8scoped") != std::string::npos;
    });
  }, 60));
  daemon = std::make_unique<DaemonProcess>(dir.file("data"), std::vector<std::string>{}, listen);
  REQUIRE(run.wait(120.0) == 0);
  CHECK(lines_of(dir.file("losses")) == lines_of(dir.file("reference")));
  CHECK(eventually([&] { return counter(*daemon, "fp8scope_samples_total") > 0; }));
  CHECK(eventually([&] {
    return counter(*daemon, "fp8scope_samples_dropped_total", {{"reason", "client_daemon_unreachable"}}) > 0;
  }));
}

TEST_CASE("the shipper killed mid-run: same losses, a new shipper takes over, drops are counted", "[hook]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  REQUIRE(trainer({"--steps", "80", "--losses", dir.file("reference")}).exit_code == 0);
  // A 1 MiB ring fills within the second the hook waits before it starts the next shipper.
  ChildProcess run(under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "shipper"},
                              {"--steps", "80", "--step-sleep-ms", "40", "--losses", dir.file("losses")}),
                   preload_env({"FP8SCOPE_RING_BYTES=1048576"}), dir.file("run.log"));
  REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_total") >= kSamplesPerStep; }));
  std::vector<int> trainers = children_of(run.pid());
  REQUIRE(trainers.size() == 1);
  std::vector<int> shippers = children_of(trainers[0]);
  REQUIRE(shippers.size() == 1);
  kill(shippers[0], SIGKILL);
  const double before = counter(daemon, "fp8scope_samples_total");
  REQUIRE(run.wait(120.0) == 0);
  CHECK(lines_of(dir.file("losses")) == lines_of(dir.file("reference")));
  CHECK(eventually([&] { return counter(daemon, "fp8scope_samples_total") > before + kSamplesPerStep; }));
  CHECK(eventually([&] { return counter(daemon, "fp8scope_samples_dropped_total", {{"reason", "client_ring_full"}}) > 0; }));
}

// The cores a process may run on, as /proc lists them ("0-1", "1").
std::string cpus_allowed(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  }
  return "";
}

TEST_CASE("the shipper the hook starts runs on the cores --shipper-cpus names, not the trainer's", "[hook]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  int last = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) last = cpu;
  }
  REQUIRE(last >= 0);
  ChildProcess run(under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "pinned", "--shipper-cpus",
                               std::to_string(last)},
                              {"--steps", "40", "--step-sleep-ms", "50"}),
                   preload_env(), dir.file("run.log"));
  REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_total") >= kSamplesPerStep; }));
  std::vector<int> trainers = children_of(run.pid());
  REQUIRE(trainers.size() == 1);
  std::vector<int> shippers = children_of(trainers[0]);
  REQUIRE(shippers.size() == 1);
  CHECK(cpus_allowed(shippers[0]) == std::to_string(last));
  if (CPU_COUNT(&mine) > 1) CHECK(cpus_allowed(trainers[0]) != std::to_string(last));  // the trainer keeps its cores
  REQUIRE(run.wait(120.0) == 0);

  const ProcessResult refused = run_process(
      under_hook({"--endpoint", daemon.grpc(), "--shipper-cpus", "3-1"}, {"--steps", "1"}), preload_env(), 60.0);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("--shipper-cpus: expected a CPU list such as 3, 0,2 or 4-7") != std::string::npos);
}

TEST_CASE("with no daemon at all the job runs the same, and says what it dropped", "[hook]") {
  TempDir dir;
  REQUIRE(trainer({"--steps", "20", "--losses", dir.file("reference")}).exit_code == 0);
  const std::string nobody = "127.0.0.1:" + std::to_string(free_port());
  const ProcessResult run = run_process(
      under_hook({"--endpoint", nobody, "--every", "1", "--job", "alone"}, {"--steps", "20", "--losses", dir.file("losses")}),
      preload_env(), 120.0);
  REQUIRE(run.exit_code == 0);
  CHECK(lines_of(dir.file("losses")) == lines_of(dir.file("reference")));
  CHECK(run.err.find("does not answer") != std::string::npos);
  CHECK(run.err.find("0 samples sent, " + std::to_string(20 * kSamplesPerStep) + " dropped (daemon_unreachable=") !=
        std::string::npos);
}

TEST_CASE("a forked child is left alone, and a GEMM captured into a graph never launched costs nothing", "[hook]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  REQUIRE(trainer({"--steps", "6", "--losses", dir.file("reference")}).exit_code == 0);
  // Under ASan, the forked child's exit-time leak check locks the whole allocator, which another
  // thread of the parent (the hook's publisher) may have held at the fork: GCC 12's sanitizer
  // runtime has no fork handler for it, and the child would hang. The child skips that check; its
  // exit handlers (the hook's among them) still run.
  std::vector<std::string> env = preload_env();
  for (std::string& e : env) {
    if (e.rfind("ASAN_OPTIONS=", 0) == 0) e += ":leak_check_at_exit=0";
  }
  const ProcessResult run = run_process(
      under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--job", "probes"},
                 {"--steps", "6", "--fork-at-step", "2", "--capture-probe", "--losses", dir.file("losses")}),
      env, 120.0);
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.find("forked child exited with 0") != std::string::npos);
  CHECK(lines_of(dir.file("losses")) == lines_of(dir.file("reference")));
  // The captured GEMM was recorded into a graph that was destroyed unlaunched: nothing sampled,
  // nothing dropped.
  CHECK(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == 6 * kSamplesPerStep; }));
  CHECK(counter(daemon, "fp8scope_samples_dropped_total", {{"reason", "client_graph_capture"}}) == 0);
}

TEST_CASE("an FP8 inference job serving the BF16 checkpoint passes the inference check, and another checkpoint fails it",
          "[hook][inference]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::string bf16_weights = dir.file("bf16.weights"), fp8_weights = dir.file("fp8.weights");
  // Training closes with an evaluation pass (step 8, sampled at --every 4) over its final weights.
  for (const auto& [mode, weights] : {std::pair{"bf16", bf16_weights}, std::pair{"fp8", fp8_weights}}) {
    const ProcessResult train = run_process(under_hook({"--endpoint", daemon.grpc(), "--every", "4", "--run", mode},
                                                       {"--steps", "8", "--mode", mode, "--save-weights", weights}),
                                            preload_env(), 120.0);
    REQUIRE(train.exit_code == 0);
  }
  for (const auto& [run, weights] : {std::pair{"serve-bf16-ckpt", bf16_weights}, std::pair{"serve-fp8-ckpt", fp8_weights}}) {
    const ProcessResult serve = run_process(
        under_hook({"--endpoint", daemon.grpc(), "--every", "4", "--run", run},
                   {"--steps", "12", "--step-sleep-ms", "20", "--mode", "fp8", "--serve", weights}),
        preload_env(), 120.0);
    REQUIRE(serve.exit_code == 0);
  }
  auto check = [&](const std::string& run) {
    json j;
    const bool ok = eventually([&] {
      const ProcessResult c = cli({"compare", "--data-dir", dir.file("data"), "--run", run, "--baseline", "bf16", "--json"});
      if (c.exit_code != 0) return false;
      j = json::parse(c.out)["inference_check"];
      return j["weights"].size() == 3;
    });
    REQUIRE(ok);
    return j;
  };
  // The served codes are the BF16 checkpoint's weights cast as the daemon casts the last sampled
  // weights of training: every layer matches, through the real hook and scale_inv pointers.
  const json same = check("serve-bf16-ckpt");
  INFO(same.dump(2));
  CHECK(same["flagged"] == 0);
  for (const json& w : same["weights"]) CHECK(w["verdict"] == "matches");
  // Serving the FP8 run's checkpoint against the BF16 run: other weights, other amaxes.
  const json other = check("serve-fp8-ckpt");
  INFO(other.dump(2));
  CHECK(other["flagged"] == 3);
  // The FP8 training run itself is no inference run: compare checks its loss, not its weights.
  const ProcessResult training = cli({"compare", "--data-dir", dir.file("data"), "--run", "fp8", "--baseline", "bf16", "--json"});
  REQUIRE(training.exit_code == 0);
  CHECK_FALSE(json::parse(training.out).contains("inference_check"));
}
