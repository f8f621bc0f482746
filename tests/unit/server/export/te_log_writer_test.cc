// fp8scoped --te-log-dir: what the daemon writes as it analyzes is what `fp8scope history --format
// nvdlfw` writes from its history, line for line; and a disk that fails or fills costs lines that
// are counted, by reason, never the daemon's analysis.
#include "fp8scope/export/te_log_writer.h"

#include <catch2/catch.hpp>
#include <prometheus/registry.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "fp8scope/analysis/sample_analysis.h"
#include "fp8scope/export/sample_publisher.h"
#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/te/debug_config.h"
#include "fp8scope/te/nvdlfw_log.h"
#include "fp8scope/te/sampling_config.h"
#include "support/server_samples.h"
#include "support/stored_records.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint64_t dropped(const TeLogCounts& c, TeLogDrop why) { return c.dropped[static_cast<std::size_t>(why)]; }

std::unique_ptr<TeLogWriter> open_writer(const std::string& dir, TeLogLimits limits = {}) {
  Result<std::unique_ptr<TeLogWriter>> w = TeLogWriter::open(dir, limits);
  REQUIRE(w.ok());
  return std::move(w).value();
}

// One analyzed sample's records, as the publisher makes them.
std::vector<history::HistoryRecord> sample_records(std::uint64_t step,
                                                   std::vector<float> values = {3.0f, -0.5f, 1.0f, 1e-9f},
                                                   const std::string& layer = "blocks.0.fc1#0",
                                                   Operand operand = Operand::kX, GemmRole gemm = GemmRole::kFprop) {
  fp8scope::testing::TempDir dir;
  prometheus::Registry registry;
  TensorSeries series{registry, SeriesOptions{}};
  TensorTable tensors{100};
  auto history = std::move(history::HistoryStore::open(dir.path(), {"test"})).value();
  SamplePublisher publisher{series, tensors, *history, MetricExport{{}, false}};
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  const Sample s = fp8scope::testing::f32_sample(layer, step, operand, values, 4, 32, gemm);
  SamplingPolicy policy;
  policy.recipes = {RecipeKind::kTensorCurrent, RecipeKind::kMxfp8};
  publisher.publish(s, analyzer.analyze(s, policy).value());
  return fp8scope::testing::stored_records(*history);
}

// Waits (bounded) until the writer has written or dropped `n` lines in all.
bool eventually_counted(const TeLogWriter& w, std::uint64_t n) {
  for (int i = 0; i < 2000; ++i) {
    const TeLogCounts c = w.counts();
    std::uint64_t total = c.lines;
    for (std::uint64_t d : c.dropped) total += d;
    if (total == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace

TEST_CASE("the daemon's TE log lines are history --format nvdlfw's, in the job's tree", "[te_log_writer]") {
  fp8scope::testing::TempDir dir;
  fp8scope::testing::TempDir store;
  prometheus::Registry registry;
  TensorSeries series{registry, SeriesOptions{}};
  TensorTable tensors{100};
  auto history = std::move(history::HistoryStore::open(store.path(), {"test"})).value();
  std::unique_ptr<TeLogWriter> writer = open_writer(dir.path());
  SamplePublisher publisher{series, tensors, *history, MetricExport{{}, false}, writer.get()};
  auto engine = make_cpu_engine(1);
  SampleAnalyzer analyzer(*engine, 16);
  SamplingPolicy policy;
  policy.recipes = {RecipeKind::kTensorCurrent, RecipeKind::kTensorDelayed, RecipeKind::kMxfp8, RecipeKind::kNvfp4};
  for (std::uint64_t step = 0; step < 3; ++step) {
    for (Operand o : {Operand::kX, Operand::kW}) {
      const Sample s = fp8scope::testing::f32_sample("blocks.0.fc1#0", step, o, {3.0f + static_cast<float>(step), -0.5f, 1e-9f});
      publisher.publish(s, analyzer.analyze(s, policy).value());
    }
  }
  writer.reset();  // writes what is queued

  std::string expected;
  te::NvdlfwLog log;
  for (const history::HistoryRecord& r : fp8scope::testing::stored_records(*history)) {
    for (const te::NvdlfwLine& line : log.lines(r)) expected += line.text + "\n";
  }
  const std::string file = dir.path() + "/job/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-3.log";
  const std::string written = read(file);
  CHECK(written == expected);
  CHECK(written.find("blocks.0.fc1_weight_fp8_delayed_scaling_overflows%") != std::string::npos);
  // Each step and tensor: LogTensorStats' 8, and underflows% and mse of each FP8 recipe, the delayed
  // one's overflows%, their scale_inv_min and _max; none of the NVFP4 what-if, which TE's
  // LogNvfp4TensorStats never logs (it reads the job's own NVFP4 cast).
  CHECK(std::count(written.begin(), written.end(), '\n') == 3 * 2 * (8 + (2 + 2) + (2 + 1 + 2) + (2 + 2)));
  CHECK(written.find("_nvfp4_") == std::string::npos);
  // MXFP8's extremes are over its blocks' scales: with values 3+step, -0.5 and 1e-9 in one block,
  // its E8M0 scale_inv is 2^(floor(log2(amax)) - 8) (TE's: the amax's exponent less E4M3's max's).
  for (const history::HistoryRecord& r : fp8scope::testing::stored_records(*history)) {
    if (!r.caster.is(RecipeKind::kMxfp8) || r.operand != Operand::kX) continue;
    const double scale_inv = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(3.0 + static_cast<double>(r.step)))) - 8);
    for (const char* stat : {"mxfp8_scale_inv_min", "mxfp8_scale_inv_max"}) {
      INFO(stat << " at step " << r.step);
      const std::string line = "blocks.0.fc1_activation_" + std::string(stat) + " \t\t\t\t iteration=00000" +
                               std::to_string(r.step) + " \t\t\t\t value=";
      char value[32];
      std::snprintf(value, sizeof value, "%.4f\n", scale_inv);  // Python's "{:.4f}"
      CHECK(written.find(line + value) != std::string::npos);
    }
  }
}

TEST_CASE("lines the writer cannot take are counted by reason, and writing resumes by itself", "[te_log_writer]") {
  fp8scope::testing::TempDir dir, outside;
  // Two steps' samples of one tensor, with as many lines each.
  const std::vector<history::HistoryRecord> records = sample_records(1), later = sample_records(2);
  te::NvdlfwLog log;
  std::uint64_t lines = 0;
  for (const history::HistoryRecord& r : records) lines += log.lines(r).size();
  REQUIRE(lines > 0);

  SECTION("a queue smaller than a sample's lines: queue_full") {
    TeLogLimits tiny;
    tiny.queue_bytes = 10;
    auto writer = open_writer(dir.path(), tiny);
    writer->add(records);
    CHECK(dropped(writer->counts(), TeLogDrop::kQueueFull) == lines);
    CHECK(writer->counts().lines == 0);
  }
  SECTION("a failing write: write_failed, then the lines of later samples once it succeeds") {
    TeLogLimits quick;
    quick.retry_after = std::chrono::milliseconds(0);
    std::filesystem::create_directory_symlink(outside.path(), dir.path() + "/job");  // refused: a link
    auto writer = open_writer(dir.path(), quick);
    writer->add(records);
    REQUIRE(eventually_counted(*writer, lines));
    CHECK(dropped(writer->counts(), TeLogDrop::kWriteFailed) == lines);
    std::filesystem::remove(dir.path() + "/job");
    writer->add(later);
    REQUIRE(eventually_counted(*writer, 2 * lines));
    CHECK(writer->counts().lines == lines);
    CHECK(std::filesystem::is_empty(outside.path()));
  }
  SECTION("the byte limit: size_limit, and what was written stays") {
    TeLogLimits small;
    std::string one;
    te::NvdlfwLog sample_log;
    for (const history::HistoryRecord& r : records) {
      for (const te::NvdlfwLine& line : sample_log.lines(r)) one += line.text + "\n";
    }
    small.max_bytes = one.size() + one.size() / 2;  // one sample's lines fit, two do not
    auto writer = open_writer(dir.path(), small);
    writer->add(records);
    writer->add(later);
    writer.reset();
    CHECK(read(dir.path() + "/job/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-3.log") == one);
    // What the files held counts against the limit after a restart too.
    auto reopened = open_writer(dir.path(), small);
    reopened->add(later);
    REQUIRE(eventually_counted(*reopened, lines));
    CHECK(dropped(reopened->counts(), TeLogDrop::kSizeLimit) == lines);
    CHECK(reopened->counts().bytes == one.size());
  }
}

TEST_CASE("LogTensorStats of a tensor with NaN or Inf are what torch gives TE, not the finite elements'", "[te_log_writer]") {
  const auto tensor_stats = [](std::vector<float> values) {
    std::map<std::string, std::string> out;  // stat -> value text
    te::NvdlfwLog log;
    for (const history::HistoryRecord& r : sample_records(0, std::move(values))) {
      for (const te::NvdlfwLine& line : log.lines(r)) {
        const std::size_t name = line.text.find("blocks.0.fc1_activation_") + 24;
        const std::string stat = line.text.substr(name, line.text.find(' ', name) - name);
        if (stat.find("underflows") == std::string::npos && stat.find("mse") == std::string::npos &&
            stat.find("scale_inv") == std::string::npos) {
          out[stat] = line.text.substr(line.text.find("value=") + 6);
        }
      }
    }
    return out;
  };
  const float inf = std::numeric_limits<float>::infinity();
  // A NaN: every torch reduction is NaN.
  for (const auto& [stat, value] : tensor_stats({3.0f, -0.5f, std::nanf(""), 1.0f})) {
    INFO(stat);
    CHECK(value == "nan");
  }
  // An Inf: the amax, the norms and the range are Inf, the std NaN; the mean, min and max depend on
  // signs fp8scope does not keep, so they have no line.
  CHECK(tensor_stats({3.0f, -inf, 1.0f, 2.0f}) == std::map<std::string, std::string>{{"cur_amax", "inf"},
                                                                                      {"dynamic_range", "inf"},
                                                                                      {"l1_norm", "inf"},
                                                                                      {"l2_norm", "inf"},
                                                                                      {"std", "nan"}});
  // Finite: fp8scope's figures.
  const std::map<std::string, std::string> finite = tensor_stats({3.0f, -0.5f, 1.0f, 1e-9f});
  CHECK(finite.at("cur_amax") == "3.0000");
  CHECK(finite.at("min") == "-0.5000");
  CHECK(finite.size() == 8);
}

TEST_CASE("a GEMM's output is logged as TE names it: output, dgrad or wgrad, LogTensorStats only", "[te_log_writer]") {
  // The stats names of every line of one output sample's records.
  const auto names = [](te::NvdlfwLog& log, const std::string& layer, GemmRole gemm) {
    std::set<std::string> out;
    for (const history::HistoryRecord& r : sample_records(3, {3.0f, -0.5f, 1.0f, 1e-9f}, layer, Operand::kOut, gemm)) {
      for (const te::NvdlfwLine& line : log.lines(r)) {
        const std::size_t at = line.text.find(" - INFO - ") + 10;
        out.insert(line.text.substr(at, line.text.find(' ', at) - at));
      }
    }
    return out;
  };
  te::NvdlfwLog all;
  const std::set<std::string> fprop = names(all, "blocks.0.mlp.fc1#0", GemmRole::kFprop);
  // Its high-precision figures, once (its records are one per what-if), no quantization's.
  CHECK(fprop == std::set<std::string>{"blocks.0.mlp.fc1_output_cur_amax", "blocks.0.mlp.fc1_output_dynamic_range",
                                       "blocks.0.mlp.fc1_output_mean", "blocks.0.mlp.fc1_output_std",
                                       "blocks.0.mlp.fc1_output_min", "blocks.0.mlp.fc1_output_max",
                                       "blocks.0.mlp.fc1_output_l1_norm", "blocks.0.mlp.fc1_output_l2_norm"});
  CHECK(names(all, "blocks.0.mlp.fc1#0", GemmRole::kWgrad).count("blocks.0.mlp.fc1_wgrad_l1_norm") == 1);
  CHECK(names(all, "blocks.0.mlp.fc1#0", GemmRole::kDgrad).count("blocks.0.mlp.fc1_dgrad_max") == 1);
  // LayerNormMLP's fc2 dgrad output: TE logs it only within fc1's dgrad.
  CHECK(names(all, "blocks.0.mlp.fc2#0", GemmRole::kDgrad).empty());
  CHECK(names(all, "blocks.0.mlp.fc2#0", GemmRole::kWgrad).count("blocks.0.mlp.fc2_wgrad_max") == 1);
  // An output of a GEMM whose role is unknown has no TE name.
  CHECK(names(all, "blocks.0.mlp.fc1#0", GemmRole::kUnknown).empty());

  // A config naming dgrad's max: that line only, and nothing for the fprop output.
  const Result<te::TeConfig> config = te::sampling_config(te::parse_debug_config(R"(outputs:
  enabled: True
  layers:
    layer_types: [fc1]
  transformer_engine:
    LogTensorStats:
      enabled: True
      stats: [max]
      tensors: [dgrad]
)", "outputs.yaml").value());
  REQUIRE(config.ok());
  te::NvdlfwLog filtered(config.value());
  CHECK(names(filtered, "blocks.0.mlp.fc1#0", GemmRole::kDgrad) == std::set<std::string>{"blocks.0.mlp.fc1_dgrad_max"});
  CHECK(names(filtered, "blocks.0.mlp.fc1#0", GemmRole::kFprop).empty());
}

TEST_CASE("a name is written once a rank and step, however many samples of the step come", "[te_log_writer]") {
  fp8scope::testing::TempDir dir;
  const std::vector<history::HistoryRecord> first = sample_records(4), second = sample_records(4, {9.0f, 1.0f});
  te::NvdlfwLog log;
  std::uint64_t lines = 0;
  for (const history::HistoryRecord& r : first) lines += log.lines(r).size();
  // The export: a second microbatch of the step adds no line.
  for (const history::HistoryRecord& r : second) CHECK(log.lines(r).empty());
  auto writer = open_writer(dir.path());
  writer->add(first);
  writer->add(second);
  REQUIRE(eventually_counted(*writer, lines));
  // The live log remembers the newest steps only: a sample that old writes its lines again.
  const std::uint64_t newest = 4 + TeLogWriter::kStepsRemembered + 1;
  writer->add(sample_records(newest));
  REQUIRE(eventually_counted(*writer, 2 * lines));
  writer->add(sample_records(newest));
  writer->add(second);
  REQUIRE(eventually_counted(*writer, 3 * lines));
  writer.reset();
  const std::string written = read(dir.path() + "/job/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-3.log");
  CHECK(written.find("value=9.0000") != std::string::npos);  // the forgotten step's second sample, once
  CHECK(static_cast<std::uint64_t>(std::count(written.begin(), written.end(), '\n')) == 3 * lines);
}
