// Transformer Engine's casts through the real binaries: fp8scoped, `fp8scope run`, the hook, its
// shipper and tiny_trainer --mode te, whose casts go through the TE stand-in of tests/fixtures/te/
// (written from TE's headers and kernels, loaded RTLD_GLOBAL, called through the PLT from its
// extension). The story: in every recipe each sampled tensor's error is the run's own, equal to what
// `fp8scope analyze` gives for the tensor the cast received with the scale and amax it used, and
// named like the GEMM that read it; the daemon's code check finds TE's casts as fp8scope models
// them, and finds the stand-in built with one rule changed; a cast the hook cannot see is counted
// uncovered; a getter that throws costs the sample, not the job; the losses are the same under the
// hook; TE 2.3's ABI reads the same; TE's debug log lines carry the run's own figures; and a job
// whose layers are named as TE names them (a LayerNormMLP's fc1 and fc2), run under TE's and
// BioNeMo's debug configs, gets the log lines TE writes for it, which BioNeMo's heatmap reads.
#include <sqlite3.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "fp8scope/kernels/block_dynamic_range.h"
#include "support/daemon_fixture.h"
#include "support/temp_dir.h"

using namespace fp8scope::testing;
using json = nlohmann::json;

namespace {

constexpr int kLayers = 3;
constexpr int kOperandsPerStep = kLayers * 3 * 2;  // three GEMMs a layer, two operands each

std::string te_dir(const std::string& build) { return std::string(FP8SCOPE_TE_FIXTURES) + "/" + build; }

std::vector<std::string> trainer_args(const std::string& recipe, const std::string& build, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--mode", "te", "--te-recipe", recipe, "--te-dir", te_dir(build), "--steps", "8"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// `fp8scope run` (sampling steps 0 and 5) around tiny_trainer --mode te.
ProcessResult hooked(const DaemonProcess& d, const std::string& run, const std::vector<std::string>& args,
                     std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {FP8SCOPE_CLI, "run", "--endpoint", d.grpc(), "--every", "5", "--job", run, "--run", run,
                                   "--", FP8SCOPE_TINY_TRAINER};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, preload_env(std::move(env)), 120.0);
}

ProcessResult plain(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {FP8SCOPE_TINY_TRAINER};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, preload_env(std::move(env)), 120.0);
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A [1, 1] fp32 .npy: its one value ends the file.
float npy_scalar(const std::string& path) {
  const std::string bytes = contents(path);
  REQUIRE(bytes.size() > 4);
  float v;
  std::memcpy(&v, bytes.data() + bytes.size() - 4, 4);
  return v;
}

// The job's own record of a tensor: what the daemon stored.
struct Own {
  std::string source, cast_recipe;
  double underflow = NAN, mse = NAN, cosine = NAN, sqnr = NAN, mismatch = NAN, scale = NAN, scale_current = NAN;
};

// Key: "mlp.<l> <gemm> <operand>", of a run's job records at `step`.
std::map<std::string, Own> own_records(const std::string& data_dir, const std::string& run, int step) {
  std::map<std::string, Own> out;
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2((data_dir + "/history.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db,
                             "SELECT layer, gemm, operand, source, cast_recipe, stat_underflow_ratio, stat_mse, "
                             "stat_cosine, stat_sqnr_db, stat_code_mismatch_ratio, scale, scale_current FROM records "
                             "WHERE run = ? AND step = ? AND recipe = 'observed'",
                             -1, &q, nullptr) == SQLITE_OK);
  sqlite3_bind_text(q, 1, run.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(q, 2, step);
  const auto text = [&](int c) {
    const unsigned char* t = sqlite3_column_text(q, c);
    return t != nullptr ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  };
  const auto real = [&](int c) { return sqlite3_column_type(q, c) == SQLITE_NULL ? NAN : sqlite3_column_double(q, c); };
  while (sqlite3_step(q) == SQLITE_ROW) {
    const std::string layer = text(0);
    Own o{text(3), text(4), real(5), real(6), real(7), real(8), real(9), real(10), real(11)};
    out[layer.substr(0, layer.find('#')) + " " + text(1) + " " + text(2)] = o;
  }
  sqlite3_finalize(q);
  sqlite3_close(db);
  return out;
}

json analyze(std::vector<std::string> args) {
  args.insert(args.begin(), "analyze");
  args.push_back("--json");
  const ProcessResult r = cli(args);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out.substr(0, r.out.find('\n')));
}

void check_equal(double got, double want, double relative) {
  if (std::isinf(want) || std::isinf(got)) {
    CHECK(got == want);
    return;
  }
  CHECK(got == Approx(want).epsilon(relative).margin(1e-300));
}

struct Recipe {
  std::string name;
  // `fp8scope analyze` arguments giving a tensor's cast in it, from its dump's scalars.
  std::vector<std::string> (*analyze_args)(const std::string& base, char tensor);
};

std::string number(float v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

std::vector<std::string> per_tensor(const char* recipe, const std::string& base, char tensor) {
  return {"--recipe", recipe, "--scale", number(npy_scalar(base + ".scale.npy")), "--format", tensor == 'd' ? "e5m2" : "e4m3"};
}

const Recipe kRecipes[] = {
    {"delayed", [](const std::string& b, char t) { return per_tensor("tensor_delayed", b, t); }},
    {"current", [](const std::string& b, char t) { return per_tensor("tensor_current", b, t); }},
    {"mxfp8", [](const std::string&, char) { return std::vector<std::string>{"--recipe", "mxfp8"}; }},
    {"block",
     [](const std::string&, char t) {
       return std::vector<std::string>{"--recipe", t == 'w' ? "block_128x128" : "block_1x128"};
     }},
    {"nvfp4",
     [](const std::string& b, char) {
       return std::vector<std::string>{"--recipe", "nvfp4", "--amax", number(npy_scalar(b + ".amax.npy"))};
     }},
};

}  // namespace

TEST_CASE("in every recipe each sampled tensor's error is the run's own, as analyze gives it for the cast's input",
          "[te]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  for (const Recipe& recipe : kRecipes) {
    SECTION(recipe.name) {
      const std::string dumps = dir.file("dump-" + recipe.name);
      std::filesystem::create_directories(dumps);
      const ProcessResult run =
          hooked(daemon, "te-" + recipe.name, trainer_args(recipe.name, "te-2.20", {"--dump-step", "5", "--dump-dir", dumps}));
      REQUIRE(run.exit_code == 0);
      REQUIRE(eventually([&] { return own_records(dir.file("data"), "te-" + recipe.name, 5).size() == kOperandsPerStep; }));
      // Every operand of both sampled steps was cast by TE, and carries its cast: named by its
      // GEMM, its figures from the cast's input (or its recompute), its codes checked.
      for (int step : {0, 5}) {
        for (const auto& [key, own] : own_records(dir.file("data"), "te-" + recipe.name, step)) {
          INFO(key << " at step " << step);
          CHECK((own.source == "cast" || own.source == "recompute"));
          CHECK_FALSE(own.cast_recipe.empty());
          if (own.cast_recipe != "nvfp4_sr") CHECK(own.mismatch == 0.0);
          CHECK_FALSE(std::isnan(own.mse));
          CHECK_FALSE(std::isnan(own.underflow));
        }
      }
      // The run's own figures at step 5 against analyze of the dumped input with the dumped scale
      // and amax: exact for a cast of a tensor in memory, to 1e-6 for a recompute (the same fp32
      // arithmetic on this machine; on a GPU, TE's kernels' own). Each tensor as the GEMM that reads
      // its row-wise copy first sees it: fprop for X and W, dgrad for Dy.
      const std::map<std::string, Own> records = own_records(dir.file("data"), "te-" + recipe.name, 5);
      for (int l = 0; l < kLayers; ++l) {
        for (const auto& [tensor, gemm, operand] : {std::tuple{'x', "fprop", "x"}, {'w', "fprop", "w"}, {'d', "dgrad", "dy"}}) {
          const std::string name = "mlp." + std::to_string(l) + "." + operand;
          const std::string base = dumps + "/" + name;
          const Own& own = records.at("mlp." + std::to_string(l) + " " + gemm + " " + operand);
          INFO(name << " (" << own.source << ", " << own.cast_recipe << ")");
          if (own.cast_recipe == "nvfp4_sr") continue;  // one draw of stochastic rounding: no oracle
          std::vector<std::string> args = recipe.analyze_args(base, tensor);
          args.insert(args.begin(), base + ".hp.npy");
          args.push_back("--operand");
          args.push_back(operand);
          const json want = analyze(args);
          const double tolerance = own.source == "cast" ? 1e-12 : 1e-6;
          check_equal(own.underflow, want["underflow_ratio"].get<double>(), tolerance);
          check_equal(own.mse, want["mse"].get<double>(), tolerance);
          check_equal(own.cosine, want["cosine"].get<double>(), tolerance);
          check_equal(own.sqnr, want["sqnr_db"].get<double>(), tolerance);
          if (recipe.name == "delayed" || recipe.name == "current") {
            // The scale the cast used, and the one current scaling picks from this very tensor: the
            // real lag of delayed scaling at this step.
            CHECK(own.scale == Approx(npy_scalar(base + ".scale.npy")).epsilon(1e-7));
            const json current = analyze({base + ".hp.npy", "--recipe", "tensor_current", "--format",
                                          tensor == 'd' ? "e5m2" : "e4m3", "--json"});
            CHECK(own.scale_current == Approx(current["scale"].get<double>()).epsilon(1e-7));
          }
        }
      }
      const std::string metrics = http_get(daemon.metrics(), "/metrics");
      CHECK(metric_value(metrics, "fp8scope_cast_samples_total", {{"job", "te-" + recipe.name}, {"source", "cast"}}) > 0);
    }
  }
}

TEST_CASE("the code check finds TE's casts as fp8scope models them, and the one rule changed", "[te]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  for (const char* recipe : {"delayed", "current", "mxfp8", "block", "nvfp4"}) {
    REQUIRE(hooked(daemon, std::string("check-") + recipe, trainer_args(recipe, "te-2.20", {})).exit_code == 0);
  }
  REQUIRE(hooked(daemon, "changed", trainer_args("delayed", "te-2.20-rule-changed", {})).exit_code == 0);
  const auto mismatches = [&](const std::string& job, const std::string& recipe) {
    return metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_cast_code_mismatches_total",
                        {{"job", job}, {"recipe", recipe}});
  };
  const auto compared = [&](const std::string& job, const std::string& recipe) {
    return metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_cast_codes_compared_total",
                        {{"job", job}, {"recipe", recipe}});
  };
  REQUIRE(eventually([&] { return compared("changed", "tensor_delayed") > 0; }));
  for (const auto& [job, recipe] : {std::pair{"check-delayed", "tensor_delayed"}, {"check-current", "tensor_current"},
                                    {"check-mxfp8", "mxfp8"}, {"check-block", "block_1x128"},
                                    {"check-block", "block_128x128"}, {"check-nvfp4", "nvfp4"},
                                    {"check-nvfp4", "nvfp4_rht"}}) {
    INFO(job << " " << recipe);
    REQUIRE(eventually([&] { return compared(job, recipe) > 0; }));
    CHECK(mismatches(job, recipe) == 0);
  }
  // The cast multiplier rounded to BF16 first: per-tensor scales that are no power of two move codes.
  CHECK(mismatches("changed", "tensor_delayed") > 0);
}

TEST_CASE("a cast the hook cannot see is uncovered, and a getter that throws costs the sample, not the job", "[te]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const auto losses = [&](const std::string& name) { return contents(dir.file(name)); };
  REQUIRE(plain(trainer_args("delayed", "te-2.20", {"--losses", dir.file("plain")})).exit_code == 0);
  REQUIRE(hooked(daemon, "same", trainer_args("delayed", "te-2.20", {"--losses", dir.file("hooked")})).exit_code == 0);
  CHECK(losses("hooked") == losses("plain"));
  CHECK_FALSE(losses("plain").empty());

  REQUIRE(hooked(daemon, "uncovered", trainer_args("delayed", "te-2.20", {"--te-uncovered-layer", "1"})).exit_code == 0);
  const auto dropped = [&](const std::string& reason) {
    const double v = metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total",
                                  {{"reason", "client_" + reason}});
    return std::isnan(v) ? 0.0 : v;
  };
  // Layer 1's W, sampled at steps 0 and 5 by fprop and dgrad: four operands sent without their cast.
  REQUIRE(eventually([&] { return dropped("cast_uncovered") == 4; }));
  REQUIRE(eventually([&] { return own_records(dir.file("data"), "uncovered", 5).size() == kOperandsPerStep; }));
  const std::map<std::string, Own> uncovered = own_records(dir.file("data"), "uncovered", 5);
  CHECK(uncovered.at("mlp.1 fprop w").source == "codes");
  CHECK(uncovered.at("mlp.1 fprop x").source == "recompute");
  CHECK(std::isnan(uncovered.at("mlp.1 fprop w").mse));

  const std::vector<std::string> throwing = {"FIXTURE_TE_THROWING_GETTER=nvte_tensor_scaling_mode"};
  REQUIRE(plain(trainer_args("nvfp4", "te-2.20", {"--losses", dir.file("plain-nvfp4")}), throwing).exit_code == 0);
  REQUIRE(hooked(daemon, "throwing", trainer_args("nvfp4", "te-2.20", {"--losses", dir.file("throwing")}), throwing)
              .exit_code == 0);
  CHECK(losses("throwing") == losses("plain-nvfp4"));
  // Every cast of the two sampled steps (X, W and Dy of each layer) lost its capture, and only that.
  REQUIRE(eventually([&] { return dropped("cast_unreadable") == 2 * kLayers * 3; }));
  REQUIRE(eventually([&] { return own_records(dir.file("data"), "throwing", 5).size() == kOperandsPerStep; }));
  for (const auto& [key, own] : own_records(dir.file("data"), "throwing", 5)) CHECK(own.source == "codes");
}

TEST_CASE("TE 2.3's ABI, pointer handles and the old NVTEShape, is read the same", "[te]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  for (const char* recipe : {"delayed", "mxfp8", "block"}) {
    const std::string run = std::string("abi-") + recipe;
    REQUIRE(hooked(daemon, run, trainer_args(recipe, "te-2.3", {})).exit_code == 0);
    REQUIRE(eventually([&] { return own_records(dir.file("data"), run, 5).size() == kOperandsPerStep; }));
    for (const auto& [key, own] : own_records(dir.file("data"), run, 5)) {
      INFO(run << " " << key);
      CHECK((own.source == "cast" || own.source == "recompute"));
      CHECK(own.mismatch == 0.0);
    }
  }
}

TEST_CASE("history --format nvdlfw, tensors and advise show the run's own figures and say where they come from",
          "[te]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::string dumps = dir.file("dump");
  for (const char* recipe : {"delayed", "nvfp4"}) {
    std::filesystem::create_directories(dumps + "/" + recipe);
    REQUIRE(hooked(daemon, std::string("log-") + recipe,
                   trainer_args(recipe, "te-2.20", {"--dump-step", "5", "--dump-dir", dumps + "/" + recipe}))
                .exit_code == 0);
  }
  for (const char* recipe : {"delayed", "nvfp4"}) {
    const std::string run = std::string("log-") + recipe;
    REQUIRE(eventually([&] { return own_records(dir.file("data"), run, 5).size() == kOperandsPerStep; }));
    const ProcessResult r = cli({"history", "--endpoint", daemon.grpc(), "--run", run, "--format", "nvdlfw"});
    REQUIRE(r.exit_code == 0);
    std::map<std::string, std::string> values;  // "name iteration" -> value
    std::istringstream lines(r.out);
    int bare = 0;
    for (std::string line; std::getline(lines, line);) {
      const std::size_t info = line.find(" - INFO - "), tabs = line.find(" \t");
      REQUIRE(info != std::string::npos);
      const std::string name = line.substr(info + 10, tabs - info - 10);
      const std::string iteration = line.substr(line.find("iteration=") + 10, 6);
      const std::string value = line.substr(line.find("value=") + 6);
      values[name + " " + iteration] = value;
      // The job's own quantization's lines (TE's bare names; NVFP4's prefixed) are never nan.
      const bool own = name.find("_underflows%") != std::string::npos || name.find("_mse") != std::string::npos;
      const bool what_if = name.find("fp8_") != std::string::npos || name.find("mxfp8") != std::string::npos;
      if (own && !what_if) {
        ++bare;
        INFO(line);
        CHECK(value != "nan");
      }
    }
    CHECK(bare > 0);
    // cur_amax in real units: the amax of the tensor the cast received (NVFP4's too, not its codes').
    const std::string bytes = contents(dumps + "/" + recipe + "/mlp.1.w.hp.npy");
    const std::size_t data = bytes.size() - 64 * 64 * 4;
    float amax = 0.0f;
    for (std::size_t i = data; i < bytes.size(); i += 4) {
      float v;
      std::memcpy(&v, bytes.data() + i, 4);
      amax = std::max(amax, std::fabs(v));
    }
    char want[32];
    std::snprintf(want, sizeof want, "%.4f", amax);
    CHECK(values.at("mlp.1_weight_cur_amax 000005") == want);
    // advise judges the run's own tensors, and says so (from: cast, or recompute for a fused one).
    const ProcessResult advise = cli({"advise", "--endpoint", daemon.grpc(), "--run", run});
    REQUIRE(advise.exit_code == 0);
    CHECK(advise.out.find(" cast ") != std::string::npos);
    CHECK(advise.out.find("baseline") == std::string::npos);
  }
  // The live table names each figure's source too.
  const ProcessResult tensors = cli({"tensors", "--endpoint", daemon.grpc(), "--recipe", "observed"});
  REQUIRE(tensors.exit_code == 0);
  CHECK(tensors.out.find(" source ") != std::string::npos);
  CHECK(tensors.out.find(" recompute ") != std::string::npos);
  CHECK(tensors.out.find(" cast ") != std::string::npos);
}

namespace {

// The lines of a log file, "name" -> iteration -> value text, in the order they come.
using LogLines = std::map<std::string, std::map<int, std::string>>;

// The lines of a log file as name -> iteration -> value text.
LogLines read_log(const std::string& file) {
  LogLines out;
  std::istringstream text(contents(file));
  for (std::string line; std::getline(text, line);) {
    const std::size_t info = line.find(" - INFO - "), tabs = line.find(" \t");
    REQUIRE(info != std::string::npos);
    out[line.substr(info + 10, tabs - info - 10)][std::stoi(line.substr(line.find("iteration=") + 10, 6))] =
        line.substr(line.find("value=") + 6);
  }
  return out;
}

// A TE-named run (tiny_trainer --te-names) under a TE debug config, its history written as that
// config's log in BioNeMo's layout (one log_dir a rank); what the log holds and what BioNeMo's
// heatmap reads from it.
struct ConfigRun {
  LogLines lines;
  json bionemo;  // nvdlfw_parsers.py --bionemo-dir
  bool written = false;
};

ConfigRun config_run(const DaemonProcess& d, const TempDir& dir, const std::string& run, const std::string& config,
                     const std::string& recipe, int steps, std::vector<std::string> extra = {}) {
  const std::string yaml = std::string(FP8SCOPE_SOURCE_DIR) + "/tests/unit/te/configs/" + config;
  std::vector<std::string> argv = {FP8SCOPE_CLI, "run", "--endpoint", d.grpc(), "--te-config", yaml, "--job", run,
                                   "--run", run, "--", FP8SCOPE_TINY_TRAINER};
  for (const std::string& a : {std::string("--mode"), std::string("te"), std::string("--te-recipe"), recipe,
                               std::string("--te-dir"), te_dir("te-2.20"), std::string("--te-names"),
                               std::string("--steps"), std::to_string(steps)}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  const ProcessResult trained = run_process(argv, preload_env(), 120.0);
  INFO(trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);  // `run` returns once the samples are stored
  const std::string logs = dir.file("logs-" + run);
  const ProcessResult exported = cli({"history", "--endpoint", d.grpc(), "--run", run, "--format", "nvdlfw",
                                      "--te-config", yaml, "--te-log-dir", logs, "--te-log-layout", "rank-dirs"});
  INFO(exported.err);
  REQUIRE(exported.exit_code == 0);
  ConfigRun out;
  const std::string file = logs + "/rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log";
  out.written = std::filesystem::exists(file);
  if (!out.written) return out;
  out.lines = read_log(file);
  const ProcessResult parsed =
      run_process({FP8SCOPE_PYTHON, std::string(FP8SCOPE_SOURCE_DIR) + "/tests/support/nvdlfw_parsers.py", "--bionemo-dir", logs});
  REQUIRE(parsed.exit_code == 0);
  out.bionemo = json::parse(parsed.out);
  return out;
}

// Every name of `layers` x `tensors` x `stats`, each at exactly `iterations`, and never nan.
void check_lines(const LogLines& got, const std::vector<std::string>& layers, const std::vector<std::string>& tensors,
                 const std::vector<std::string>& stats, const std::set<int>& iterations, std::set<std::string>& expected) {
  for (const std::string& layer : layers) {
    for (const std::string& tensor : tensors) {
      for (const std::string& stat : stats) {
        const std::string name = layer + "_" + tensor + "_" + stat;
        expected.insert(name);
        INFO(name);
        REQUIRE(got.count(name) == 1);
        std::set<int> at;
        for (const auto& [iteration, value] : got.at(name)) {
          at.insert(iteration);
          CHECK(value != "nan");
        }
        CHECK(at == iterations);
      }
    }
  }
}

std::set<std::string> names_of(const LogLines& lines) {
  std::set<std::string> out;
  for (const auto& [name, values] : lines) out.insert(name);
  return out;
}

const std::string kFc1 = "model.layers.1.layernorm_mlp.fc1", kFc2 = "model.layers.1.layernorm_mlp.fc2",
                  kOutput = "model.output_layer";

}  // namespace

TEST_CASE("TE's log_config on a TE-named job: TE's lines, name for name and step for step", "[te][te_names]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  // Every layer's activation: five LogTensorStats every 3rd step and the FP8 underflows every 5th,
  // from step 1, as TE's test_log_every_3_or_5_layers runs it (20 steps).
  const ConfigRun r = config_run(daemon, dir, "te-log", "te_log_config.yaml", "delayed", 20);
  REQUIRE(r.written);
  std::set<std::string> expected;
  const std::vector<std::string> layers = {kFc1, kFc2, kOutput};
  check_lines(r.lines, layers, {"activation"}, {"cur_amax", "dynamic_range", "mean", "std", "l1_norm"},
              {3, 6, 9, 12, 15, 18}, expected);
  check_lines(r.lines, layers, {"activation"}, {"underflows%"}, {5, 10, 15}, expected);
  CHECK(names_of(r.lines) == expected);
}

TEST_CASE("TE's test_sanity log config: every tensor TE names, GEMM outputs too, TE's lines", "[te][te_names]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const ConfigRun r = config_run(daemon, dir, "te-sanity", "te_sanity_log.yaml", "delayed", 3);
  REQUIRE(r.written);
  const std::vector<std::string> stats = {"min", "max", "mean", "std", "l1_norm", "l2_norm", "cur_amax", "dynamic_range"};
  std::set<std::string> expected;
  check_lines(r.lines, {kFc1, kFc2, kOutput}, {"activation", "gradient", "weight", "output", "wgrad"}, stats, {0, 1},
              expected);
  // fc2's dgrad output is logged within fc1's only (layernorm_mlp.py:1250-1255).
  check_lines(r.lines, {kFc1, kOutput}, {"dgrad"}, stats, {0, 1}, expected);
  CHECK(names_of(r.lines) == expected);
}

TEST_CASE("BioNeMo's FP8 config: TE's lines for fc1 and fc2, and its heatmap finds the layer", "[te][te_names]") {
  TempDir dir;
  // The daemon writes the job's TE log as it analyzes, in BioNeMo's layout too.
  const std::string live = dir.file("live");
  DaemonProcess daemon(dir.file("data"), {"--te-log-dir", live, "--te-log-layout", "rank-dirs"});
  const ConfigRun r = config_run(daemon, dir, "bionemo-fp8", "bionemo_fp8_stats.yaml", "delayed", 21);
  REQUIRE(r.written);
  // layer_types [layernorm_qkv, proj, fc1, fc2]: the LayerNormMLP's two GEMMs, not the output layer.
  std::set<std::string> expected;
  check_lines(r.lines, {kFc1, kFc2}, {"activation", "gradient", "weight"},
              {"underflows%", "scale_inv_min", "scale_inv_max", "mse"}, {0, 10, 20}, expected);
  // The dgrad and wgrad GEMMs' outputs every step. TE logs fc2's dgrad output only within fc1's
  // (layernorm_mlp.py:1250-1255): no fc2 dgrad line.
  std::set<int> every_step;
  for (int step = 0; step <= 20; ++step) every_step.insert(step);
  const std::vector<std::string> output_stats = {"max", "min", "mean", "std", "l1_norm"};
  check_lines(r.lines, {kFc1}, {"dgrad"}, output_stats, every_step, expected);
  check_lines(r.lines, {kFc1, kFc2}, {"wgrad"}, output_stats, every_step, expected);
  CHECK(names_of(r.lines) == expected);
  // BioNeMo's reader parses every line but the negative ones (its regex has no sign), and draws
  // layer 1.
  std::size_t parsed = 0, positive = 0;
  for (const auto& [name, values] : r.bionemo["bionemo"].items()) parsed += values.size();
  for (const auto& [name, values] : r.lines) {
    for (const auto& [iteration, value] : values) positive += value[0] != '-';
  }
  CHECK(parsed == positive);
  CHECK(positive > expected.size() * 3);
  REQUIRE(r.bionemo["components"].size() == 1);
  const json& row = r.bionemo["components"][0];
  CHECK(row["group"] == "encoder");
  CHECK(row["identifier"] == 1);
  CHECK(r.bionemo["bionemo"][row["metric"].get<std::string>()].size() == 3);
  // The daemon's own log of the job (fp8scope run gave it the config's stat lists with the
  // policy) holds the same lines as the export under the config.
  const std::string file = live + "/bionemo-fp8/rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log";
  REQUIRE(eventually([&] { return std::filesystem::exists(file) && read_log(file) == r.lines; }));
}

TEST_CASE("BioNeMo's FP4 config: the NVFP4 job's own lines, none on a job that is not NVFP4", "[te][te_names]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const ConfigRun nvfp4 = config_run(daemon, dir, "bionemo-fp4", "bionemo_fp4_stats.yaml", "nvfp4", 2);
  REQUIRE(nvfp4.written);
  // Layers 1-5 get LogNvfp4TensorStats at step 0 (freq 100); the MXFP8 section selects layers 6-10,
  // which this model lacks.
  std::set<std::string> expected;
  check_lines(nvfp4.lines, {kFc1, kFc2}, {"activation", "gradient"}, {"nvfp4_underflows%", "nvfp4_mse"}, {0}, expected);
  CHECK(names_of(nvfp4.lines) == expected);
  // TE skips LogNvfp4TensorStats for a quantizer that is not NVFP4 (log_nvfp4_tensor_stats.py:159-184).
  const ConfigRun fp8 = config_run(daemon, dir, "bionemo-fp4-on-fp8", "bionemo_fp4_stats.yaml", "delayed", 2);
  CHECK_FALSE(fp8.written);
}

TEST_CASE("TE's high-precision config: max_blockwise_dynamic_range in 1D and 2D blocks, as TE names it", "[te][te_names]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::string dumps = dir.file("dump");
  std::filesystem::create_directories(dumps);
  const ConfigRun r = config_run(daemon, dir, "te-hp", "te_high_precision.yaml", "delayed", 11,
                                 {"--dump-step", "4", "--dump-dir", dumps});
  REQUIRE(r.written);
  // Activations and weights: the larger of both orientations, so named; gradients row-wise.
  std::set<std::string> expected;
  const std::vector<std::string> layers = {kFc1, kFc2, kOutput};
  const std::set<int> steps = {0, 2, 4, 6, 8, 10};
  check_lines(r.lines, layers, {"activation", "weight", "gradient"}, {"dynamic_range"}, steps, expected);
  check_lines(r.lines, layers, {"activation", "weight"},
              {"max_blockwise_dynamic_range_block_size_4_dims_1_max_over_orientations",
               "max_blockwise_dynamic_range_block_size_4_dims_2_max_over_orientations"},
              steps, expected);
  check_lines(r.lines, layers, {"gradient"},
              {"max_blockwise_dynamic_range_block_size_4_dims_1", "max_blockwise_dynamic_range_block_size_4_dims_2"}, steps,
              expected);
  CHECK(names_of(r.lines) == expected);
  // fc2's weight at step 4 is the tensor its cast received (the trainer's dump): the figure is
  // kernels/block_dynamic_range.h's over it (block_dynamic_range_test pins that to TE's steps).
  const std::string bytes = contents(dumps + "/mlp.1.w.hp.npy");
  REQUIRE(bytes.size() > 64 * 64 * 4);
  std::vector<float> w(64 * 64);
  std::memcpy(w.data(), bytes.data() + bytes.size() - w.size() * 4, w.size() * 4);
  const fp8scope::TensorView view{w.data(), fp8scope::DType::kF32, 64, 64};
  for (std::uint32_t dims : {1u, 2u}) {
    const double want = std::max(fp8scope::max_block_dynamic_range(view, {4, dims}, false),
                                 fp8scope::max_block_dynamic_range(view, {4, dims}, true));
    char text[32];
    std::snprintf(text, sizeof text, "%.4f", want);
    CHECK(r.lines.at(kFc2 + "_weight_max_blockwise_dynamic_range_block_size_4_dims_" + std::to_string(dims) +
                     "_max_over_orientations").at(4) == text);
  }
}
