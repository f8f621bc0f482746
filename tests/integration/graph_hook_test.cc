// The hook and CUDA graphs end to end, through the real binaries and the CPU fixtures, whose driver
// captures and replays graphs as the driver API documents it: tiny_trainer --cuda-graph runs step
// 0 as it is, captures step 1 into a graph and replays it every step after, so the hook sees its
// GEMMs on the host once, at capture. The story: a graphed run's losses are its ungraphed run's,
// with the hook or without; every sampled tensor of its replayed steps reaches the daemon named as
// in the ungraphed run, with the statistics `fp8scope analyze` gives its dumps, into the history
// and the report; GEMM outputs are copied after their GEMM; replays nobody samples copy nothing; a graph recaptured, updated in place,
// instantiated twice or destroyed while its samples are in flight loses nothing it sent and is
// never misread; and every way a program reaches the graph calls (the driver's PLT, cuGetProcAddress,
// the runtime) and every capture mode works.
#include <sqlite3.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <nlohmann/json.hpp>

#include "fp8scope/vocabulary/recipe_kind.h"
#include "support/daemon_fixture.h"
#include "support/temp_dir.h"

using namespace fp8scope::testing;
using json = nlohmann::json;

namespace {

constexpr int kLayers = 3;
constexpr int kSamplesPerStep = kLayers * 3 * 2;  // three GEMMs per layer, two operands each

ProcessResult trainer(std::vector<std::string> args) {
  args.insert(args.begin(), FP8SCOPE_TINY_TRAINER);
  return run_process(args, preload_env(), 120.0);
}

// `fp8scope run <run_args> -- tiny_trainer <trainer_args>`.
ProcessResult under_hook(std::vector<std::string> run_args, const std::vector<std::string>& trainer_args,
                         std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {FP8SCOPE_CLI, "run"};
  argv.insert(argv.end(), run_args.begin(), run_args.end());
  argv.push_back("--");
  argv.push_back(FP8SCOPE_TINY_TRAINER);
  argv.insert(argv.end(), trainer_args.begin(), trainer_args.end());
  return run_process(argv, preload_env(std::move(env)), 120.0);
}

double counter(DaemonProcess& d, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  const double v = metric_value(http_get(d.metrics(), "/metrics"), name, labels);
  return std::isnan(v) ? 0.0 : v;
}

// A run's records in the SQLite history, one line each: what they name and what they measured, in
// a fixed order (the order they were stored in varies).
std::vector<std::string> records_of(const std::string& data_dir, const std::string& run) {
  std::vector<std::string> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2((data_dir + "/history.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return out;
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT step, layer, gemm, operand, recipe, format, source, cast_recipe, stat_amax, "
                     "stat_underflow_ratio, stat_mse, stat_cosine, stat_code_mismatch_ratio, scale, scale_current, "
                     "expert, expert_tokens FROM records WHERE run = ? "
                     "ORDER BY step, layer, gemm, operand, expert, recipe, format",
                     -1, &q, nullptr);
  sqlite3_bind_text(q, 1, run.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(q) == SQLITE_ROW) {
    std::string line = std::to_string(sqlite3_column_int64(q, 0));
    for (int c = 1; c < 17; ++c) {
      const unsigned char* t = sqlite3_column_text(q, c);
      line += " " + std::string(t != nullptr ? reinterpret_cast<const char*>(t) : "-");
    }
    out.push_back(line);
  }
  sqlite3_finalize(q);
  sqlite3_close(db);
  return out;
}

std::size_t lines_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  return static_cast<std::size_t>(
      std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; }));
}

struct Mode {
  const char* name;
  const char* codes;  // analyze --dtype of its dumps
  std::map<std::string, std::string> layout;  // analyze --scale-layout by operand; empty: a per-tensor scale
  std::size_t records_per_sample;  // high precision: one per default recipe; codes: their own only
};
const Mode kModes[] = {
    {"bf16", "bf16", {}, fp8scope::kDefaultRecipeCount},
    {"fp8", "e4m3", {}, 1},
    {"mxfp8", "e4m3", {{"x", "vec32_ue8m0"}, {"w", "vec32_ue8m0"}, {"dy", "vec32_ue8m0"}}, 1},
    {"block", "e4m3", {{"x", "vec128_32f"}, {"w", "blk128x128_32f"}, {"dy", "vec128_32f"}}, 1},
    {"nvfp4", "e2m1", {{"x", "vec16_ue4m3"}, {"w", "vec16_ue4m3"}, {"dy", "vec16_ue4m3"}}, 1},
    {"nvfp4_row", "e2m1", {{"x", "vec16_ue4m3_row_scaled"}, {"w", "vec16_ue4m3"}, {"dy", "vec16_ue4m3"}}, 1},
};

}  // namespace

TEST_CASE("a graphed trainer's replayed steps reach the daemon named and measured as its ungraphed run's",
          "[hook][graph]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::map<std::string, std::vector<std::string>> operands = {
      {"fprop", {"x", "w"}}, {"dgrad", {"w", "dy"}}, {"wgrad", {"x", "dy"}}};
  double expected = 0;
  std::uint64_t records = 0;
  for (const Mode& m : kModes) {
    const std::string mode = m.name;
    INFO(mode);
    const std::string dump = dir.file("dump-" + mode);
    std::filesystem::create_directories(dump);
    // Steps 0 and 5 sampled: 0 runs as it is, 5 is a replay.
    const std::vector<std::string> steps = {"--steps", "7", "--mode", mode};
    auto with = [&](std::vector<std::string> more) {
      std::vector<std::string> args = steps;
      args.insert(args.end(), more.begin(), more.end());
      return args;
    };
    REQUIRE(trainer(with({"--losses", dir.file(mode + ".plain")})).exit_code == 0);
    REQUIRE(trainer(with({"--cuda-graph", "--losses", dir.file(mode + ".graph")})).exit_code == 0);
    const std::string trace = dir.file(mode + ".trace");
    const ProcessResult hooked = under_hook(
        {"--endpoint", daemon.grpc(), "--every", "5", "--job", "graphs", "--run", mode + "-graph"},
        with({"--cuda-graph", "--losses", dir.file(mode + ".hooked"), "--dump-step", "5", "--dump-dir", dump}),
        {"FP8SCOPE_FIXTURE_TRACE=" + trace});
    REQUIRE(hooked.exit_code == 0);
    REQUIRE(under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--job", "graphs", "--run", mode + "-eager"},
                       with({})).exit_code == 0);
    CHECK(lines_of(dir.file(mode + ".graph")) == lines_of(dir.file(mode + ".plain")));
    CHECK(lines_of(dir.file(mode + ".hooked")) == lines_of(dir.file(mode + ".plain")));
    // The replay of step 5 copied each sampled operand once, and no other replay copied anything.
    CHECK(lines_starting(lines_of(trace), "fp8scope_plan_copy") == kSamplesPerStep);
    expected += 4 * kSamplesPerStep;
    records += 4 * kSamplesPerStep * m.records_per_sample;
    REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == expected; }));

    // The metrics of the replayed step are analyze's of what it read.
    const std::string metrics = http_get(daemon.metrics(), "/metrics");
    for (int l = 0; l < kLayers; ++l) {
      for (const auto& [gemm, ops] : operands) {
        for (const std::string& op : ops) {
          const std::string base = dump + "/mlp." + std::to_string(l) + "." + gemm + "." + op;
          INFO(base);
          // Delayed scaling's gradients are E5M2 (TE's HYBRID format).
          const std::string codes = mode == "fp8" && op == "dy" ? "e5m2" : m.codes;
          std::vector<std::string> args = {"analyze", base + ".npy", "--dtype", codes, "--json", "--recipe",
                                           "tensor_current"};
          if (!m.layout.empty()) {
            args.insert(args.end(), {"--scale-layout", m.layout.at(op), "--scales", base + ".scales.npy"});
          }
          const ProcessResult analyze = cli(args);
          REQUIRE(analyze.exit_code == 0);
          const json want = json::parse(analyze.out);
          const std::map<std::string, std::string> tensor = {
              {"job", "graphs"}, {"layer", "mlp." + std::to_string(l) + "#0"}, {"gemm", gemm}, {"operand", op}};
          // FP8's dumps are its codes without their scale, and NVFP4's codes from a GEMM alone are
          // relative to a per-tensor factor (no series in the tensor's unit): what does not
          // depend on the scale.
          const bool relative = mode.rfind("nvfp4", 0) == 0;
          if (relative) CHECK(want["value_units"] == "relative");
          const bool scaled = mode != "fp8" && !relative;
          for (const char* key : {"amax", "amin", "zero_ratio", "dynamic_range_log2", "mean"}) {
            INFO(key);
            if (!scaled && std::string(key) != "zero_ratio" && std::string(key) != "dynamic_range_log2") continue;
            // The daemon's ratio is of scaled values, analyze's of the codes: a few ulps apart.
            const double tolerance = std::string(key) == "dynamic_range_log2" ? 1e-6 : 1e-12;
            CHECK(metric_value(metrics, std::string("fp8scope_") + key, tensor) ==
                  Approx(want[key].get<double>()).epsilon(tolerance));
          }
        }
      }
    }
    // The history holds the same records, named alike, for the graphed run and the ungraphed one.
    wait_for_records_stored(daemon, records);
    const std::vector<std::string> graphed = records_of(dir.file("data"), mode + "-graph");
    CHECK(graphed.size() >= 2 * kSamplesPerStep);
    CHECK(graphed == records_of(dir.file("data"), mode + "-eager"));
  }
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
  // The report of a graphed run shows its replayed step's tensors.
  const ProcessResult report =
      cli({"report", "--data-dir", dir.file("data"), "--run", "fp8-graph", "-o", dir.file("report.html")});
  REQUIRE(report.exit_code == 0);
  std::ifstream html(dir.file("report.html"));
  const std::string text((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  for (int l = 0; l < kLayers; ++l) CHECK(text.find("mlp." + std::to_string(l) + "#0") != std::string::npos);
}

TEST_CASE("GEMM outputs are copied after their GEMM, eager and at a graph's replays, as the GEMMs wrote them",
          "[hook][graph]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  double expected = 0;
  for (const char* mode : {"bf16", "fp8", "mxfp8"}) {
    INFO(mode);
    for (const bool graphed : {false, true}) {
      INFO((graphed ? "graphed" : "eager"));
      const std::string run = std::string(mode) + (graphed ? "-graph" : "-eager");
      const std::string dump = dir.file("dump-" + run), trace = dir.file(run + ".trace");
      std::filesystem::create_directories(dump);
      std::vector<std::string> args = {"--steps", "7", "--mode", mode, "--dump-step", "5", "--dump-dir", dump};
      if (graphed) args.push_back("--cuda-graph");
      // Outputs only: a policy that names them samples nothing else.
      const ProcessResult hooked = under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--operands", "out",
                                               "--job", "outputs", "--run", run},
                                              args, {"FP8SCOPE_FIXTURE_TRACE=" + trace});
      REQUIRE(hooked.exit_code == 0);
      // One output per GEMM of steps 0 and 5; a graph's replays copy the outputs of step 5 only.
      expected += 2 * kLayers * 3;
      if (graphed) CHECK(lines_starting(lines_of(trace), "fp8scope_plan_copy") == kLayers * 3);
      REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == expected; }));
      const std::string metrics = http_get(daemon.metrics(), "/metrics");
      for (int l = 0; l < kLayers; ++l) {
        for (const char* gemm : {"fprop", "dgrad", "wgrad"}) {
          const std::string file = dump + "/mlp." + std::to_string(l) + "." + gemm + ".out.npy";
          INFO(file);
          const ProcessResult analyze = cli({"analyze", file, "--json", "--recipe", "tensor_current", "--format",
                                             std::string(gemm) == "dgrad" ? "e5m2" : "e4m3"});
          REQUIRE(analyze.exit_code == 0);
          const json want = json::parse(analyze.out);
          const std::map<std::string, std::string> tensor = {
              {"job", "outputs"}, {"layer", "mlp." + std::to_string(l) + "#0"}, {"gemm", gemm}, {"operand", "out"}};
          for (const char* key : {"amax", "amin", "mean", "std", "l2_norm", "dynamic_range_log2"}) {
            INFO(key);
            CHECK(metric_value(metrics, std::string("fp8scope_") + key, tensor) ==
                  Approx(want[key].get<double>()).epsilon(1e-12));
          }
          // Its what-ifs are the input's it becomes: dgrad's output is the gradient below (E5M2).
          std::map<std::string, std::string> recipe = tensor;
          recipe["recipe"] = "tensor_current";
          recipe["format"] = std::string(gemm) == "dgrad" ? "e5m2" : "e4m3";
          CHECK(metric_value(metrics, "fp8scope_mse", recipe) == Approx(want["mse"].get<double>()).epsilon(1e-12));
          CHECK(metric_value(metrics, "fp8scope_last_step", tensor) == 5.0);
        }
      }
    }
    wait_for_records_stored(daemon, static_cast<std::uint64_t>(expected) * fp8scope::kDefaultRecipeCount);
    CHECK(records_of(dir.file("data"), std::string(mode) + "-graph") ==
          records_of(dir.file("data"), std::string(mode) + "-eager"));
  }
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
}

TEST_CASE("a graphed Transformer Engine trainer's casts are sampled at its replays as in its eager run",
          "[hook][graph][te]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  std::uint64_t samples = 0, records = 0;
  for (const std::string recipe : {"delayed", "current", "mxfp8", "block", "nvfp4"}) {
    INFO(recipe);
    const std::vector<std::string> te = {"--mode", "te", "--te-recipe", recipe, "--te-dir",
                                         std::string(FP8SCOPE_TE_FIXTURES) + "/te-2.20", "--steps", "7"};
    auto with = [&](std::vector<std::string> more) {
      more.insert(more.begin(), te.begin(), te.end());
      return more;
    };
    REQUIRE(trainer(with({"--losses", dir.file(recipe + ".plain")})).exit_code == 0);
    for (const std::string form : {"graph", "eager"}) {
      std::vector<std::string> args = with({"--losses", dir.file(recipe + "." + form)});
      if (form == "graph") args.push_back("--cuda-graph");
      const std::string run = "te-" + recipe + "-" + form;
      REQUIRE(under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--job", run, "--run", run}, args).exit_code == 0);
      CHECK(lines_of(dir.file(recipe + "." + form)) == lines_of(dir.file(recipe + ".plain")));
    }
    // Steps 0 and 5 of both runs: every operand with its cast (its own figures, and the default
    // recipes' what-ifs on the cast's input).
    samples += 2 * 2 * kSamplesPerStep;
    records += 2 * 2 * kSamplesPerStep * (1 + fp8scope::kDefaultRecipeCount);
    REQUIRE(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == samples; }));
    wait_for_records_stored(daemon, records);
    const std::vector<std::string> graphed = records_of(dir.file("data"), "te-" + recipe + "-graph");
    CHECK(lines_starting(graphed, "5 ") > 0);
    CHECK(graphed == records_of(dir.file("data"), "te-" + recipe + "-eager"));
    for (const char* source : {"cast", "recompute", "noop"}) {
      CHECK(counter(daemon, "fp8scope_cast_samples_total", {{"job", "te-" + recipe + "-graph"}, {"source", source}}) ==
            counter(daemon, "fp8scope_cast_samples_total", {{"job", "te-" + recipe + "-eager"}, {"source", source}}));
    }
  }
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
}

TEST_CASE("a graphed mixture of experts is sampled by expert at its replays as its eager run is",
          "[hook][graph][moe]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::string dump = dir.file("dump");
  std::filesystem::create_directories(dump);
  constexpr int kExperts = 6;
  auto with = [&](std::vector<std::string> more) {
    const std::vector<std::string> moe = {"--mode", "moe", "--moe-gemm", "lt-grouped", "--moe-pad", "1",
                                          "--experts", std::to_string(kExperts), "--top-k", "2", "--steps", "7"};
    more.insert(more.begin(), moe.begin(), moe.end());
    return more;
  };
  REQUIRE(trainer(with({"--losses", dir.file("plain")})).exit_code == 0);
  const std::string trace = dir.file("trace");
  const ProcessResult graphed =
      under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--job", "moe", "--run", "moe-graph"},
                 with({"--cuda-graph", "--losses", dir.file("graph"), "--dump-step", "5", "--dump-dir", dump}),
                 {"FP8SCOPE_FIXTURE_TRACE=" + trace});
  INFO(graphed.err);
  REQUIRE(graphed.exit_code == 0);
  REQUIRE(under_hook({"--endpoint", daemon.grpc(), "--every", "5", "--job", "moe", "--run", "moe-eager"},
                     with({"--losses", dir.file("eager")})).exit_code == 0);
  CHECK(lines_of(dir.file("graph")) == lines_of(dir.file("plain")));
  CHECK(lines_of(dir.file("eager")) == lines_of(dir.file("plain")));
  // The replay of step 5 gathered every expert's two operands of each expert GEMM once, and copied
  // the dense layers' operands; no other replay copied anything.
  const std::vector<std::string> copies = lines_of(trace);
  CHECK(lines_starting(copies, "fp8scope_plan_gather") == kExperts * 3 * 2);
  CHECK(lines_starting(copies, "fp8scope_plan_copy") == (kLayers - 1) * 3 * 2);
  // Every record of the graphed run, experts and their tokens included, is the eager run's.
  std::vector<std::string> graph_records, eager_records;
  REQUIRE(eventually([&] {
    graph_records = records_of(dir.file("data"), "moe-graph");
    eager_records = records_of(dir.file("data"), "moe-eager");
    return lines_starting(graph_records, "5 mlp.1.experts#0") > 0 && graph_records == eager_records;
  }));
  // ... and holds analyze's figures of what the replay read, expert by expert.
  int dumped = 0;
  for (int e = 0; e < kExperts; ++e) {
    for (const auto& [gemm, op] : {std::pair<std::string, std::string>{"fprop", "x"}, {"fprop", "w"}, {"dgrad", "dy"},
                                   {"wgrad", "x"}, {"wgrad", "dy"}}) {
      const std::string file = dump + "/mlp.1.experts." + gemm + "." + op + ".e" + std::to_string(e) + ".npy";
      if (!std::filesystem::exists(file)) continue;  // an expert without tokens this step
      INFO(file);
      ++dumped;
      const ProcessResult analyze = cli({"analyze", file, "--dtype", "bf16", "--json", "--recipe", "tensor_current",
                                         "--format", op == "dy" ? "e5m2" : "e4m3"});
      REQUIRE(analyze.exit_code == 0);
      const json want = json::parse(analyze.out);
      // step layer gemm operand recipe format source cast_recipe amax underflow mse ... expert tokens
      std::vector<std::string> f;
      for (const std::string& l : graph_records) {
        std::istringstream fields(l);
        std::vector<std::string> got{std::istream_iterator<std::string>(fields), std::istream_iterator<std::string>()};
        if (got.size() == 17 && got[0] == "5" && got[1] == "mlp.1.experts#0" && got[2] == gemm && got[3] == op &&
            got[4] == "tensor_current" && got[15] == std::to_string(e)) {
          f = got;
        }
      }
      REQUIRE(f.size() == 17);
      CHECK(std::stod(f[10]) == Approx(want["mse"].get<double>()).epsilon(1e-12));
      CHECK(std::stod(f[9]) == want["underflow_ratio"].get<double>());
      CHECK(std::stoll(f[16]) > 0);  // the expert's tokens, from the group sizes on the device
    }
  }
  CHECK(dumped >= 5);
  // Two experts a call: each replay's nodes copy the next two of each GEMM, so the six replays
  // (steps 1 to 6) see every expert.
  const std::string rotating = dir.file("rotating.trace");
  REQUIRE(under_hook({"--endpoint", daemon.grpc(), "--every", "1", "--experts-per-call", "2", "--job", "moe", "--run",
                      "moe-rotating"},
                     with({"--cuda-graph"}), {"FP8SCOPE_FIXTURE_TRACE=" + rotating}).exit_code == 0);
  std::map<std::string, int> per_expert;
  for (const std::string& l : lines_of(rotating)) {
    if (l.rfind("fp8scope_plan_gather", 0) == 0) ++per_expert[l.substr(l.find("expert="))];
  }
  CHECK(per_expert.size() == kExperts);
  for (const auto& [expert, copies] : per_expert) CHECK(copies == 6 * 3 * 2 * 2 / kExperts);
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
}

TEST_CASE("a graph recaptured, updated in place, instantiated twice or destroyed mid-flight is never misread",
          "[hook][graph]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  REQUIRE(trainer({"--steps", "12", "--mode", "fp8", "--losses", dir.file("plain")}).exit_code == 0);
  // Every step sampled: at 4 the graph is captured again, instantiated, and the exec and graph
  // that replayed step 3 destroyed while its samples may still be on their way; at 7 captured
  // again and the running exec updated in place; from 9 a second exec of the graph lives for two
  // steps, whose replays then share the recorded copies and are not sampled.
  const ProcessResult run = under_hook(
      {"--endpoint", daemon.grpc(), "--every", "1", "--job", "lifetimes"},
      {"--steps", "12", "--mode", "fp8", "--cuda-graph", "--graph-recapture-at", "4", "--graph-update-at", "7",
       "--graph-twin-at", "9", "--losses", dir.file("hooked")});
  REQUIRE(run.exit_code == 0);
  CHECK(lines_of(dir.file("hooked")) == lines_of(dir.file("plain")));
  const double sampled = 10 * kSamplesPerStep, shared = 2 * kSamplesPerStep;
  CHECK(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == sampled; }));
  CHECK(eventually([&] {
    return counter(daemon, "fp8scope_samples_dropped_total", {{"reason", "client_graph_shared"}}) == shared;
  }));
  wait_for_records_stored(daemon, static_cast<std::uint64_t>(sampled));
  // Each sampled step once, each with all its tensors: nothing arrived twice or from another step.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2((dir.file("data") + "/history.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(db, "SELECT step, COUNT(DISTINCT layer || gemm || operand) FROM records GROUP BY step ORDER BY step",
                     -1, &q, nullptr);
  std::vector<std::pair<int, int>> per_step;
  while (sqlite3_step(q) == SQLITE_ROW) per_step.emplace_back(sqlite3_column_int(q, 0), sqlite3_column_int(q, 1));
  sqlite3_finalize(q);
  sqlite3_close(db);
  std::vector<std::pair<int, int>> want;
  for (int step : {0, 1, 2, 3, 4, 5, 6, 7, 8, 11}) want.emplace_back(step, kSamplesPerStep);
  CHECK(per_step == want);
}

TEST_CASE("graphs are seen through the driver's PLT, cuGetProcAddress and the runtime, in every capture mode",
          "[hook][graph]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  REQUIRE(trainer({"--steps", "5", "--mode", "bf16", "--losses", dir.file("plain")}).exit_code == 0);
  double expected = 0;
  for (const auto& [api, mode] : {std::pair{"driver", "thread-local"}, std::pair{"proc-address", "relaxed"},
                                  std::pair{"runtime", "global"}}) {
    INFO(api << " " << mode);
    const ProcessResult run = under_hook(
        {"--endpoint", daemon.grpc(), "--every", "2", "--job", api},
        {"--steps", "5", "--mode", "bf16", "--cuda-graph", "--graph-api", api, "--graph-capture-mode", mode, "--losses",
         dir.file(std::string(api) + ".losses")});
    REQUIRE(run.exit_code == 0);
    CHECK(lines_of(dir.file(std::string(api) + ".losses")) == lines_of(dir.file("plain")));
    expected += 3 * kSamplesPerStep;  // steps 0, 2 and 4
    CHECK(eventually([&] { return counter(daemon, "fp8scope_samples_analyzed_total") == expected; }));
  }
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
}
