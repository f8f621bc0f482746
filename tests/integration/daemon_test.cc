// fp8scoped through its real binary: what `fp8scope push` sends shows up in /metrics with the
// numbers `fp8scope analyze` prints, policies reach connected streams, history survives restarts,
// SIGTERM drains, every kind of bad input is refused and counted while good clients carry on,
// and 32 clients at once are all served.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <cmath>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "fp8scope/te/nvdlfw_log_files.h"
#include "support/csv_table.h"
#include "support/daemon_fixture.h"
#include "support/daemon_samples.h"
#include "support/temp_dir.h"
#include "fp8scope/kernels/gemm_check.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/kernels/stats.h"
#include "fp8scope/wire/wire.h"

using namespace fp8scope;
using namespace fp8scope::testing;
using nlohmann::json;

namespace {

std::string floats(const std::vector<float>& values) {
  std::string s;
  for (float v : values) s += le_bytes(v);
  return s;
}

// An activation-like tensor with an outlier channel and some tiny values.
std::vector<float> activation(int rows, int cols, float seed) {
  std::vector<float> v;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float x = std::sin(seed + 0.37f * static_cast<float>(r * cols + c));
      v.push_back(x * (c == 3 ? 500.0f : 1.0f) * (c == 7 ? 1e-5f : 1.0f));
    }
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

v1::Hello hello(const std::string& run, std::uint32_t rank = 0) {
  v1::Hello h;
  h.set_protocol_version(wire::kProtocolVersion);
  h.set_job("test");
  h.set_run(run);
  h.set_rank(rank);
  h.set_world_size(64);
  return h;
}

std::span<const std::uint8_t> bytes_of(const std::vector<float>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(float)};
}

std::map<std::string, std::string> recipe_labels(const std::string& layer, const std::string& recipe,
                                                 const std::string& format = "e4m3") {
  return {{"job", "test"}, {"layer", layer}, {"gemm", "fprop"}, {"operand", "x"}, {"format", format}, {"recipe", recipe}};
}

}  // namespace

TEST_CASE("pushed tensors appear in /metrics with the values fp8scope analyze prints", "[daemon]") {
  TempDir dir;
  // Every recipe and the histogram as series (the default exports fewer: next test).
  DaemonProcess daemon(dir.file("data"), {"--metric-recipes", "all", "--log2-histogram-metrics"});
  const std::string file = dir.write("act.npy", npy_file("<f4", false, "(16, 256)", floats(activation(16, 256, 1.0f))));
  const ProcessResult push = cli({"push", file, "--endpoint", daemon.grpc(), "--layer", "blocks.0.attn.qkv",
                                  "--operand", "x", "--gemm", "fprop", "--step", "1", "--run", "r1", "--job", "test"});
  REQUIRE(push.exit_code == 0);
  CHECK(push.out.find("accepted blocks.0.attn.qkv") != std::string::npos);
  const ProcessResult analyze = cli({"analyze", file, "--json"});
  REQUIRE(analyze.exit_code == 0);
  // tensor_delayed on a first step runs at TE's initial scale, 1: compare with analyze --scale 1.
  const ProcessResult delayed = cli({"analyze", file, "--json", "--recipe", "tensor_delayed", "--scale", "1"});
  REQUIRE(delayed.exit_code == 0);
  std::string metrics;
  REQUIRE(eventually([&] {
    metrics = http_get(daemon.metrics(), "/metrics");
    return !std::isnan(metric_value(metrics, "fp8scope_mse", recipe_labels("blocks.0.attn.qkv", "block_128x128")));
  }));
  std::vector<json> expected;
  std::istringstream lines(analyze.out + delayed.out);
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line);
    if (j["recipe"] == "tensor_delayed" && j["scale"] != 1.0) continue;  // analyze's steady state
    expected.push_back(j);
  }
  REQUIRE(expected.size() == 7);  // every recipe, FP8 and FP4
  for (const json& e : expected) {
    const std::string recipe = e["recipe"];
    INFO(recipe);
    for (const auto& [key, metric] : std::map<std::string, std::string>{{"underflow_ratio", "fp8scope_underflow_ratio"},
                                                                         {"overflow_ratio", "fp8scope_overflow_ratio"},
                                                                         {"mse", "fp8scope_mse"},
                                                                         {"cosine", "fp8scope_cosine_similarity"},
                                                                         {"sqnr_db", "fp8scope_sqnr_db"}}) {
      INFO(key);
      const double got = metric_value(metrics, metric, recipe_labels("blocks.0.attn.qkv", recipe, e["format"]));
      CHECK(got == Approx(e[key].get<double>()).epsilon(1e-12).margin(1e-300));
    }
  }
  const std::map<std::string, std::string> tensor = {{"job", "test"}, {"layer", "blocks.0.attn.qkv"}, {"gemm", "fprop"},
                                                     {"operand", "x"}};
  CHECK(metric_value(metrics, "fp8scope_amax", tensor) == expected[0]["amax"].get<double>());
  // Column 3 stands 500x above the others: the one outlier channel of this X.
  CHECK(metric_value(metrics, "fp8scope_channel_amax_ratio", tensor) == expected[0]["channel_amax_ratio"].get<double>());
  CHECK(expected[0]["channel_amax_ratio"].get<double>() > 100);
  CHECK(metric_value(metrics, "fp8scope_outlier_channels", tensor) == 1.0);
  CHECK(metric_value(metrics, "fp8scope_persistent_outlier_channels", tensor) == 1.0);
  CHECK(metric_value(metrics, "fp8scope_last_step", tensor) == 1.0);
  CHECK(metric_value(metrics, "fp8scope_scale", recipe_labels("blocks.0.attn.qkv", "tensor_current")) ==
        Approx(expected[0]["scale"].get<double>()));
  CHECK(metric_value(metrics, "fp8scope_samples_total", {}) == 1.0);
  // The log2|x*s| histogram under current scaling: shares summing to 1, the amax element in
  // E4M3's top binade (448 = 1.75 * 2^8), nothing exported above it.
  auto bin = [&](int log2) {
    auto labels = recipe_labels("blocks.0.attn.qkv", "tensor_current");
    labels["log2"] = std::to_string(log2);
    return metric_value(metrics, "fp8scope_log2_magnitude_ratio", labels);
  };
  double shares = 0.0;
  for (int b = fp8scope::kHistogramMinLog2; b <= 8; ++b) shares += bin(b);
  CHECK(shares == Approx(1.0).epsilon(1e-12));
  CHECK(bin(8) > 0.0);
  CHECK(std::isnan(bin(9)));
  // The CLI views.
  const ProcessResult tensors = cli({"tensors", "--endpoint", daemon.grpc(), "--sort", "underflow", "--json"});
  REQUIRE(tensors.exit_code == 0);
  CHECK(json::parse(tensors.out)["key"]["layer"] == "blocks.0.attn.qkv");
  const ProcessResult table = cli({"tensors", "--endpoint", daemon.grpc()});
  CHECK(table.out.rfind("job ", 0) == 0);  // one daemon serves many jobs: each row names its own
  CHECK(table.out.find("\ntest             blocks.0.attn.qkv ") != std::string::npos);
  const ProcessResult status = cli({"status", "--endpoint", daemon.grpc(), "--json"});
  REQUIRE(status.exit_code == 0);
  CHECK(json::parse(status.out)["samples_analyzed"] == "1");  // uint64 is a JSON string in proto3 JSON

  // Everything both endpoints serve is in the metrics table (and so in docs/metrics.md), or is
  // prometheus-cpp's own, which docs/metrics.md names too.
  std::ifstream doc(std::string(FP8SCOPE_SOURCE_DIR) + "/docs/metrics.md");
  const std::string metrics_md((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  std::set<std::string> documented;
  for (const json& row : json::parse(run_process({FP8SCOPE_DAEMON, "--print-metrics-table"}).out)) {
    documented.insert(row["name"].get<std::string>());
  }
  for (const char* path : {"/metrics", "/health"}) {
    std::istringstream exposition(http_get(daemon.metrics(), path));
    for (std::string line; std::getline(exposition, line);) {
      if (line.rfind("# TYPE ", 0) != 0) continue;
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      INFO(path << ": " << name);
      if (name.rfind("exposer_", 0) == 0) {
        CHECK(metrics_md.find("`" + name + "`") != std::string::npos);
      } else {
        CHECK(documented.count(name) == 1);
      }
    }
  }
}

TEST_CASE("an outlier column persists over --outlier-channel-window samples, and history names it", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"), {"--outlier-channel-window", "2"});
  const std::string hot = dir.write("hot.npy", npy_file("<f4", false, "(16, 256)", floats(activation(16, 256, 1.0f))));
  std::vector<float> even = activation(16, 256, 2.0f);
  for (int r = 0; r < 16; ++r) even[static_cast<std::size_t>(r * 256 + 3)] /= 500.0f;  // column 3 back in line
  const std::string level = dir.write("level.npy", npy_file("<f4", false, "(16, 256)", floats(even)));
  int step = 0;
  for (const std::string& file : {hot, hot, level, hot}) {
    const ProcessResult push = cli({"push", file, "--endpoint", daemon.grpc(), "--layer", "blocks.0.mlp.fc2", "--operand",
                                    "x", "--step", std::to_string(++step), "--run", "r1", "--job", "test"});
    REQUIRE(push.exit_code == 0);
  }
  CsvTable rows;
  REQUIRE(eventually([&] {
    const ProcessResult history =
        cli({"history", "--endpoint", daemon.grpc(), "--run", "r1", "--recipe", "tensor_current", "--csv"});
    if (history.exit_code != 0) return false;
    rows = parse_csv(history.out);
    return rows.rows.size() == 4;
  }));
  // Steps 1, 2: column 3 in both; 3: in neither of the last two; 4: only in the last.
  const char* want[] = {"3", "3", "", ""};
  for (std::size_t k = 0; k < 4; ++k) CHECK(rows.at(k, "outlier_channels") == want[k]);
  const std::string metrics = http_get(daemon.metrics(), "/metrics");
  const std::map<std::string, std::string> tensor = {{"job", "test"}, {"layer", "blocks.0.mlp.fc2"}, {"gemm", "fprop"},
                                                     {"operand", "x"}};
  CHECK(metric_value(metrics, "fp8scope_outlier_channels", tensor) == 1.0);
  CHECK(metric_value(metrics, "fp8scope_persistent_outlier_channels", tensor) == 0.0);
}

TEST_CASE("by default a 128-layer transformer fits the series budget, and history keeps every recipe", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  // One linear layer as training runs it: X and W in fprop, Dy and W in dgrad, X and Dy in wgrad.
  auto stream = SampleStream::open(to(daemon), hello("cardinality"));
  REQUIRE(stream.ok());
  const std::vector<float> values = activation(16, 256, 2.0f);
  const std::pair<v1::Gemm, v1::Operand> operands[] = {{v1::GEMM_FPROP, v1::OPERAND_X}, {v1::GEMM_FPROP, v1::OPERAND_W},
                                                       {v1::GEMM_DGRAD, v1::OPERAND_DY}, {v1::GEMM_DGRAD, v1::OPERAND_W},
                                                       {v1::GEMM_WGRAD, v1::OPERAND_X}, {v1::GEMM_WGRAD, v1::OPERAND_DY}};
  for (const auto& [gemm, operand] : operands) {
    v1::TensorHeader h = f32_header("blocks.0.mlp.fc1", 1, 16, 256);
    h.set_gemm(gemm);
    h.set_operand(operand);
    REQUIRE(stream.value()->send(h, bytes_of(values)).ok());
  }
  REQUIRE(stream.value()->wait_for_acks(30).ok());
  std::string metrics;
  REQUIRE(eventually([&] {
    metrics = http_get(daemon.metrics(), "/metrics");
    return metric_value(metrics, "fp8scope_samples_analyzed_total", {}) == 6.0;
  }));
  std::size_t linear_series = 0;
  std::set<std::string> recipes;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find("layer=\"blocks.0.mlp.fc1\"") == std::string::npos) continue;
    ++linear_series;
    if (const auto at = line.find("recipe=\""); at != std::string::npos) {
      recipes.insert(line.substr(at + 8, line.find('"', at + 8) - at - 8));
    }
    CHECK(line.rfind("fp8scope_log2_magnitude_ratio", 0) != 0);  // the histogram is opt-in
  }
  CHECK(recipes == std::set<std::string>{"tensor_current", "tensor_delayed", "mxfp8"});
  const ProcessResult config = run_process({FP8SCOPE_DAEMON, "--print-config"});
  const auto at = config.out.find("# max-series=");
  REQUIRE(at != std::string::npos);
  const double max_series = std::stod(config.out.substr(at + 13));
  // 128 transformer blocks of four linear layers (QKV, projection, FC1, FC2).
  const double transformer = 128.0 * 4.0 * static_cast<double>(linear_series);
  INFO(linear_series << " series per linear layer; a 128-block transformer needs " << transformer << " of "
                     << max_series);
  CHECK(transformer <= max_series);
  CHECK(linear_series <= 6 * 40);  // docs/operations.md promises about 35 series per tensor

  // Every recipe the policy runs is still analyzed: history and the tensor table have all seven.
  CHECK(eventually([&] {
    const ProcessResult history = cli({"history", "--endpoint", daemon.grpc(), "--layer", "blocks.0.mlp.fc1", "--csv"});
    // 6 samples x 7 recipes (the forward GEMM's output check is kept in a table of its own)
    return history.exit_code == 0 && parse_csv(history.out).rows.size() == 6 * 7;
  }));
  const ProcessResult tensors = cli({"tensors", "--endpoint", daemon.grpc(), "--recipe", "nvfp4", "--json"});
  REQUIRE(tensors.exit_code == 0);
  CHECK(tensors.out.find("\"nvfp4\"") != std::string::npos);
}

TEST_CASE("a policy change reaches a connected stream", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  std::mutex mu;
  std::condition_variable cv;
  v1::Policy seen;
  auto stream = SampleStream::open(to(daemon), hello("policy"), 10.0, [&](const v1::Policy& p) {
    std::lock_guard<std::mutex> lock(mu);
    seen = p;
    cv.notify_all();
  });
  REQUIRE(stream.ok());
  CHECK(stream.value()->policy().version() == 1);
  const ProcessResult set = cli({"policy", "set", "--endpoint", daemon.grpc(), "--every", "5", "--layer-regex", "attn",
                                 "--operands", "x,dy", "--recipe", "mxfp8"});
  REQUIRE(set.exit_code == 0);
  std::unique_lock<std::mutex> lock(mu);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return seen.version() == 2; }));
  CHECK(seen.every_n_steps() == 5);
  CHECK(seen.layer_regex() == "attn");
  CHECK(seen.operands_size() == 2);
  const ProcessResult get = cli({"policy", "get", "--endpoint", daemon.grpc()});
  CHECK(get.out.find("recipes mxfp8") != std::string::npos);
  CHECK(cli({"policy", "set", "--endpoint", daemon.grpc(), "--layer-regex", "(("}).exit_code == 2);
}

TEST_CASE("a job's own policy reaches its streams and leaves other jobs alone, and --every 0 is refused", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  struct Seen {
    std::mutex mu;
    v1::Policy policy;
    int changes = 0;
  };
  Seen a, b;
  auto open = [&](const std::string& job, Seen& seen) {
    v1::Hello h = hello("jobs");
    h.set_job(job);
    auto s = SampleStream::open(to(daemon), h, 10.0, [&seen](const v1::Policy& p) {
      std::lock_guard<std::mutex> lock(seen.mu);
      seen.policy = p;
      ++seen.changes;
    });
    REQUIRE(s.ok());
    return std::move(s).value();
  };
  auto stream_a = open("team-a", a);
  auto stream_b = open("team-b", b);
  auto policy_of = [](Seen& seen) {
    std::lock_guard<std::mutex> lock(seen.mu);
    return seen.policy;
  };

  const ProcessResult zero = cli({"policy", "set", "--endpoint", daemon.grpc(), "--every", "0"});
  CHECK(zero.exit_code == 2);
  CHECK(zero.err.find("--every: expected 1 or more (1 = every step)") != std::string::npos);

  REQUIRE(cli({"policy", "set", "--endpoint", daemon.grpc(), "--job", "team-a", "--every", "1"}).exit_code == 0);
  REQUIRE(eventually([&] { return policy_of(a).every_n_steps() == 1; }, 10));
  CHECK(policy_of(a).job() == "team-a");
  CHECK(policy_of(b).every_n_steps() == 10);  // team-b heard nothing new
  CHECK(policy_of(b).version() == 1);
  CHECK(cli({"policy", "get", "--endpoint", daemon.grpc(), "--job", "team-a"}).out.find("job team-a's own policy") == 0);
  const ProcessResult default_policy = cli({"policy", "get", "--endpoint", daemon.grpc()});
  CHECK(default_policy.out.find("the default policy") == 0);
  CHECK(default_policy.out.find("every_n_steps 10") != std::string::npos);

  // The default changes: team-b follows it, team-a keeps its own until it inherits again.
  REQUIRE(cli({"policy", "set", "--endpoint", daemon.grpc(), "--every", "3"}).exit_code == 0);
  REQUIRE(eventually([&] { return policy_of(b).every_n_steps() == 3; }, 10));
  CHECK(policy_of(a).every_n_steps() == 1);
  REQUIRE(cli({"policy", "set", "--endpoint", daemon.grpc(), "--job", "team-a", "--inherit"}).exit_code == 0);
  CHECK(eventually([&] { return policy_of(a).every_n_steps() == 3 && policy_of(a).job().empty(); }, 10));
  CHECK(cli({"policy", "set", "--endpoint", daemon.grpc(), "--inherit"}).exit_code == 2);  // whose?
}

TEST_CASE("history survives a restart, and SIGTERM drains what was queued", "[daemon]") {
  TempDir dir;
  const std::string data = dir.file("data");
  std::uint64_t accepted = 0;
  {
    DaemonProcess daemon(data, {"--analysis-workers", "1", "--engine-threads", "1", "--drain-seconds", "60"});
    auto stream = SampleStream::open(to(daemon), hello("drain"));
    REQUIRE(stream.ok());
    const std::vector<float> big = activation(1024, 2048, 2.0f);  // 8 MiB each
    for (int i = 0; i < 6; ++i) REQUIRE(stream.value()->send(f32_header("big", static_cast<std::uint64_t>(i), 1024, 2048), bytes_of(big)).ok());
    auto acks = stream.value()->wait_for_acks(60.0);
    REQUIRE(acks.ok());
    for (const auto& [id, ack] : acks.value()) accepted += ack.outcome() == v1::SAMPLE_OUTCOME_ACCEPTED;
    REQUIRE(stream.value()->close().ok());
    CHECK(daemon.stop(SIGTERM) == 0);  // exits 0 after analyzing the queue
    CHECK(daemon.log().find("stopped: " + std::to_string(accepted) + " samples analyzed") != std::string::npos);
  }
  CHECK(accepted == 6);
  DaemonProcess again(data);
  const ProcessResult history = cli({"history", "--endpoint", again.grpc(), "--run", "drain", "--csv"});
  REQUIRE(history.exit_code == 0);
  const CsvTable table = parse_csv(history.out);
  CHECK(table.rows.size() == 6 * 7);  // 6 samples x 7 recipes
  CHECK(table.header.at(0) == "time");
}

TEST_CASE("history --csv quotes per RFC 4180: a strict reader gets every name back, under one header", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  // Names ingest accepts (printable ASCII) that break a CSV written without quoting.
  const std::vector<std::string> layers = {"h.q,\"quoted\",x", "a\"b", "trailing,", ",leading", "plain.fc1"};
  {
    auto stream = SampleStream::open(to(daemon), hello("csv"));
    REQUIRE(stream.ok());
    for (const std::string& layer : layers) {
      REQUIRE(stream.value()->send(f32_header(layer, 0, 16, 16), bytes_of(activation(16, 16, 1.0f))).ok());
    }
    REQUIRE(stream.value()->wait_for_acks(60.0).ok());
  }
  CsvTable table;
  REQUIRE(eventually([&] {
    const ProcessResult r = cli({"history", "--endpoint", daemon.grpc(), "--run", "csv", "--csv"});
    if (r.exit_code != 0) return false;
    table = parse_csv(r.out);
    return table.rows.size() == layers.size() * kDefaultRecipeCount;
  }));
  std::set<std::string> names, columns;
  for (std::size_t r = 0; r < table.rows.size(); ++r) names.insert(table.at(r, "layer"));
  CHECK(names == std::set<std::string>(layers.begin(), layers.end()));
  for (const std::string& c : table.header) CHECK(columns.insert(c).second);  // every column once
}

TEST_CASE("a history written by anything else can neither forge a line nor name a rank it cannot hold", "[daemon]") {
  TempDir dir;
  {
    DaemonProcess daemon(dir.file("data"));
    auto stream = SampleStream::open(to(daemon), hello("forged"));
    REQUIRE(stream.ok());
    for (const char* layer : {"a#0", "b#0", "c#0"}) {
      REQUIRE(stream.value()->send(f32_header(layer, 1, 16, 16), bytes_of(activation(16, 16, 1.0f))).ok());
    }
    REQUIRE(stream.value()->wait_for_acks(60.0).ok());
    wait_for_records_stored(daemon, 3 * kDefaultRecipeCount);
    REQUIRE(daemon.stop(SIGTERM) == 0);
  }
  // What an older fp8scope, a shared database or a hand-edited copy may hold.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dir.file("data") + "/history.sqlite").c_str(), &db) == SQLITE_OK);
  const char* edits =
      "UPDATE records SET rank = -1 WHERE layer = 'a#0';"
      "UPDATE records SET rank = 1099511627776 WHERE layer = 'b#0';"
      "UPDATE records SET layer = 'c' || char(10) || '2026-01-01 00:00:00,000 - INFO - forged_activation_mse "
      "iteration=000001 value=0.0000' || char(27) || '[2J#0' WHERE layer = 'c#0';";
  REQUIRE(sqlite3_exec(db, edits, nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const ProcessResult lines = cli({"history", "--history", dir.file("data"), "--format", "nvdlfw"});
  REQUIRE(lines.exit_code == 0);
  std::istringstream in(lines.out);
  int count = 0;
  for (std::string line; std::getline(in, line); ++count) {
    INFO(line);
    CHECK(line.find(" - INFO - c\\n2026-01-01") == 23);  // c's lines alone, its name escaped, one line each
    CHECK(line.find('\x1b') == std::string::npos);
  }
  CHECK(count > 0);
  const ProcessResult table = cli({"history", "--history", dir.file("data")});
  REQUIRE(table.exit_code == 0);
  CHECK(std::count(table.out.begin(), table.out.end(), '\x1b') == 0);
  CHECK(table.out.find("\n2026-01-01") == std::string::npos);
  // Ranks -1 and 2^40 name no file: rank 0's holds c's lines alone.
  const ProcessResult files = cli({"history", "--history", dir.file("data"), "--format", "nvdlfw", "--te-log-dir",
                                   dir.file("te-logs")});
  REQUIRE(files.exit_code == 0);
  std::set<std::string> written;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("te-logs/nvdlfw_inspect_statistics_logs"))) {
    written.insert(e.path().filename().string());
  }
  CHECK(written == std::set<std::string>{"nvdlfw_inspect_globalrank-0.log"});
  CHECK(read_file(dir.file("te-logs/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log")) == lines.out);
}

TEST_CASE("history --format nvdlfw writes TE's debug log lines, which TE's and BioNeMo's parsers read as --csv says",
          "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  {
    auto stream = SampleStream::open(to(daemon), hello("te", 3));
    REQUIRE(stream.ok());
    for (std::uint64_t step = 0; step < 3; ++step) {
      v1::TensorHeader h = f32_header("blocks.0.mlp.fc1#0", step, 64, 64);
      REQUIRE(stream.value()->send(h, bytes_of(activation(64, 64, 1.0f + static_cast<float>(step)))).ok());
    }
    REQUIRE(stream.value()->wait_for_acks(60.0).ok());
  }
  CsvTable csv;
  REQUIRE(eventually([&] {
    const ProcessResult r = cli({"history", "--endpoint", daemon.grpc(), "--run", "te", "--csv"});
    if (r.exit_code != 0) return false;
    csv = parse_csv(r.out);
    return csv.rows.size() == 3 * 7;
  }));
  const std::string logs = dir.file("te-logs");
  const ProcessResult written = cli({"history", "--endpoint", daemon.grpc(), "--run", "te", "--format", "nvdlfw",
                                     "--te-log-dir", logs});
  REQUIRE(written.exit_code == 0);
  const std::string file = logs + "/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-3.log";  // the rank's
  const ProcessResult parsed =
      run_process({"/usr/bin/python3", std::string(FP8SCOPE_SOURCE_DIR) + "/tests/support/nvdlfw_parsers.py", file});
  REQUIRE(parsed.exit_code == 0);
  const json found = json::parse(parsed.out);
  // --csv's columns by name, then each record's figures as TE names them, in TE's units.
  int checked = 0;
  for (std::size_t r = 0; r < csv.rows.size(); ++r) {
    const std::string recipe = csv.at(r, "recipe");
    const int step = std::stoi(csv.at(r, "step"));
    const std::string prefix = recipe == "tensor_current" ? "fp8_current_scaling_" : recipe == "tensor_delayed"
                                   ? "fp8_delayed_scaling_" : recipe == "mxfp8" ? "mxfp8_" : "";
    if (prefix.empty()) continue;
    const std::string name = "blocks.0.mlp.fc1_activation_" + prefix;
    for (const char* parser : {"te", "bionemo"}) {
      INFO(parser << " " << name << " step " << step);
      const double underflow = 100.0 * std::stod(csv.at(r, "stat_underflow_ratio"));
      CHECK(found[parser][name + "underflows%"][std::to_string(step)].get<double>() == Approx(underflow).margin(5e-5));
      CHECK(found[parser][name + "mse"][std::to_string(step)].get<double>() ==
            Approx(std::stod(csv.at(r, "stat_mse"))).margin(5e-5));
      CHECK(found[parser]["blocks.0.mlp.fc1_activation_cur_amax"][std::to_string(step)].get<double>() ==
            Approx(std::stod(csv.at(r, "stat_amax"))).margin(5e-5));
      // scale_inv's extremes, over the tensor's one scale or its blocks' (MXFP8's too).
      const auto number = [&](const char* column) {
        const std::string v = csv.at(r, column);
        return v.empty() ? 0.0 : std::stod(v);  // an empty cell: none
      };
      const double scale = number("scale"), scale_max = std::max(scale, number("scale_max"));
      CHECK(found[parser][name + "scale_inv_min"][std::to_string(step)].get<double>() ==
            Approx(1.0 / scale_max).margin(5e-5));
      CHECK(found[parser][name + "scale_inv_max"][std::to_string(step)].get<double>() == Approx(1.0 / scale).margin(5e-5));
      ++checked;
    }
  }
  CHECK(checked == 2 * 3 * 3);
  // The same lines on stdout without --te-log-dir; --te-log-dir alone is a usage error.
  const ProcessResult printed = cli({"history", "--endpoint", daemon.grpc(), "--run", "te", "--format", "nvdlfw"});
  std::ifstream in(file);
  CHECK(printed.out == std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  CHECK(cli({"history", "--endpoint", daemon.grpc(), "--te-log-dir", logs}).exit_code == 2);
}

TEST_CASE("fp8scoped --te-log-dir writes each job's TE debug logs as it analyzes, as history --format nvdlfw does",
          "[daemon]") {
  TempDir dir;
  const std::string logs = dir.file("te-logs");
  const std::vector<std::string> args{"--te-log-dir", logs, "--analysis-workers", "1"};
  const auto send = [](DaemonProcess& daemon, v1::Hello h, std::uint64_t first, std::uint64_t steps) {
    auto stream = SampleStream::open(to(daemon), h);
    REQUIRE(stream.ok());
    for (std::uint64_t step = first; step < first + steps; ++step) {
      v1::TensorHeader header = f32_header("blocks.0.mlp.fc1#0", step, 64, 64);
      REQUIRE(stream.value()->send(header, bytes_of(activation(64, 64, 1.0f + static_cast<float>(step)))).ok());
    }
    REQUIRE(stream.value()->wait_for_acks(60.0).ok());
  };
  v1::Hello hostile = hello("escape");
  hostile.set_job("../../escape");  // a printable label, so a valid job: it must not become a path
  const std::string file = logs + "/test/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-3.log";
  const std::string escaped = logs + "/%2E.%2F..%2Fescape/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log";
  const auto lines_written = [](const DaemonProcess& daemon) {
    return metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_te_log_lines_total", {});
  };
  std::string before_restart;
  {
    DaemonProcess daemon(dir.file("data"), args);
    send(daemon, hello("te-live", 3), 0, 3);
    send(daemon, hostile, 0, 1);
    // Written as the history holds it: the same lines history --format nvdlfw prints, in order.
    ProcessResult printed, printed_hostile;
    const auto lines = [](const ProcessResult& r) { return static_cast<double>(std::count(r.out.begin(), r.out.end(), '\n')); };
    REQUIRE(eventually([&] {
      printed = cli({"history", "--endpoint", daemon.grpc(), "--job", "test", "--format", "nvdlfw"});
      printed_hostile = cli({"history", "--endpoint", daemon.grpc(), "--job", "../../escape", "--format", "nvdlfw"});
      return lines(printed) > 0 && lines(printed_hostile) > 0 &&
             lines_written(daemon) == lines(printed) + lines(printed_hostile);
    }));
    before_restart = read_file(file);
    CHECK(before_restart == printed.out);
    CHECK(read_file(escaped) == printed_hostile.out);
    const std::string metrics = http_get(daemon.metrics(), "/metrics");
    CHECK(nonzero_series(metrics, "fp8scope_te_log_lines_dropped_total").empty());
    CHECK(metric_value(metrics, "fp8scope_te_log_lines_dropped_total", {{"reason", "write_failed"}}) == 0.0);
    CHECK(daemon.stop(SIGTERM) == 0);
  }
  std::set<std::string> top;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) top.insert(e.path().filename().string());
  CHECK(top == std::set<std::string>{"data", "te-logs"});  // nothing escaped the log dir
  const ProcessResult parsed =
      run_process({"/usr/bin/python3", std::string(FP8SCOPE_SOURCE_DIR) + "/tests/support/nvdlfw_parsers.py", file});
  REQUIRE(parsed.exit_code == 0);
  const json found = json::parse(parsed.out);
  for (const char* parser : {"te", "bionemo"}) {
    INFO(parser);
    CHECK(found[parser]["blocks.0.mlp.fc1_activation_fp8_current_scaling_mse"].size() == 3);  // steps 0, 1, 2
  }

  // A restarted daemon appends: what the first one wrote stays.
  DaemonProcess again(dir.file("data"), args);
  send(again, hello("te-live", 3), 3, 1);
  REQUIRE(eventually([&] { return lines_written(again) > 0; }));
  const std::string after = read_file(file);
  CHECK(after.size() > before_restart.size());
  CHECK(after.compare(0, before_restart.size(), before_restart) == 0);
  CHECK(after.find("iteration=000003") != std::string::npos);

  // A limit too small to hold one sample is refused at start.
  const ProcessResult tiny = run_process({FP8SCOPE_DAEMON, "--data-dir", dir.file("other"), "--te-log-dir", logs,
                                          "--te-log-max-bytes", "1000", "--listen", "127.0.0.1:0", "--metrics",
                                          "127.0.0.1:0"},
                                         {}, 30);
  CHECK(tiny.exit_code == 1);
  CHECK((tiny.out + tiny.err).find("--te-log-max-bytes: expected at least 1 MiB, got 1000") != std::string::npos);
}

TEST_CASE("fp8scoped --te-log-dir: a job's longest legal name is a file too, and no job's failure silences another",
          "[daemon]") {
  TempDir dir;
  const std::string logs = dir.file("te-logs");
  DaemonProcess daemon(dir.file("data"), {"--te-log-dir", logs, "--analysis-workers", "1"});
  const auto send = [&](const std::string& job, std::uint32_t rank) {
    v1::Hello h = hello("te-names", rank);
    h.set_job(job);
    auto stream = SampleStream::open(to(daemon), h);
    REQUIRE(stream.ok());
    REQUIRE(stream.value()->send(f32_header("blocks.0.mlp.fc1#0", 0, 64, 64), bytes_of(activation(64, 64, 1.0f))).ok());
    REQUIRE(stream.value()->wait_for_acks(60.0).ok());
  };
  const std::string longest(200, '/');  // escapes to 600 bytes: past NAME_MAX unless shortened
  // A rank's file made unwritable (a directory in its place): its job fails, the others write.
  const std::string blocked = logs + "/blocked/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log";
  std::filesystem::create_directories(blocked);
  send(longest, 0);
  send("blocked", 0);
  send("other", 0);
  send("blocked", 0);
  send("later", 0);
  const std::map<std::string, std::string> failed = {{"reason", "write_failed"}};
  REQUIRE(eventually([&] {
    const std::string metrics = http_get(daemon.metrics(), "/metrics");
    return metric_value(metrics, "fp8scope_te_log_lines_dropped_total", failed) > 0 &&
           std::filesystem::exists(logs + "/later/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log");
  }));
  CHECK(std::filesystem::exists(logs + "/" + fp8scope::te::escape_job(longest) +
                                "/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"));
  CHECK(std::filesystem::exists(logs + "/other/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"));
}

TEST_CASE("bad input is refused and counted, and the daemon keeps serving and loses nothing accepted", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"), {"--max-series", "60"});
  // A good sample first: it must still be there at the end.
  auto good = SampleStream::open(to(daemon), hello("good"));
  REQUIRE(good.ok());
  const std::vector<float> small = activation(4, 32, 3.0f);
  REQUIRE(good.value()->send(f32_header("kept", 1, 4, 32), bytes_of(small)).ok());
  REQUIRE(good.value()->wait_for_acks(30).ok());

  auto channel = open_channel(to(daemon)).value();
  auto stub = v1::Ingest::NewStub(channel);
  SECTION("an unsupported protocol version gets a clear error") {
    grpc::ClientContext ctx;
    auto s = stub->Stream(&ctx);
    v1::ClientMessage m;
    *m.mutable_hello() = hello("old");
    m.mutable_hello()->set_protocol_version(9);
    s->Write(m);
    s->WritesDone();
    v1::ServerMessage reply;
    while (s->Read(&reply)) {
    }
    const grpc::Status st = s->Finish();
    CHECK(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(st.error_message().find("unsupported protocol version 9") != std::string::npos);
  }
  SECTION("a chunk before Hello, and an empty message") {
    grpc::ClientContext ctx;
    auto s = stub->Stream(&ctx);
    v1::ClientMessage m;
    m.mutable_chunk()->set_sample_id(1);
    s->Write(m);
    s->WritesDone();
    v1::ServerMessage reply;
    while (s->Read(&reply)) {
    }
    CHECK(s->Finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  SECTION("malformed samples: wrong size, unknown dtype, absurd shape, gaps, oversized messages") {
    auto stream = SampleStream::open(to(daemon), hello("bad"));
    REQUIRE(stream.ok());
    v1::TensorHeader wrong = f32_header("bad", 1, 4, 32);
    wrong.add_shape(2);  // shape x dtype no longer matches the bytes sent
    REQUIRE(stream.value()->send(wrong, bytes_of(small)).ok());
    v1::TensorHeader dtype = f32_header("bad", 1, 4, 32);
    dtype.set_dtype(static_cast<v1::DType>(42));
    REQUIRE(stream.value()->send(dtype, bytes_of(small)).ok());
    v1::TensorHeader absurd = f32_header("bad", 1, 4, 32);
    absurd.set_shape(0, std::int64_t{1} << 40);
    REQUIRE(stream.value()->send(absurd, bytes_of(small)).ok());
    auto acks = stream.value()->wait_for_acks(30);
    REQUIRE(acks.ok());
    std::vector<std::string> reasons;
    for (const auto& [id, ack] : acks.value()) {
      CHECK(ack.outcome() == v1::SAMPLE_OUTCOME_REJECTED);
      reasons.push_back(ack.reason());
    }
    CHECK(reasons == std::vector<std::string>{"size_mismatch", "bad_dtype", "size_mismatch"});
    // A raw stream with a gap, then one message over the size limit.
    grpc::ClientContext ctx;
    auto s = stub->Stream(&ctx);
    v1::ClientMessage m;
    *m.mutable_hello() = hello("raw");
    s->Write(m);
    v1::ClientMessage c;
    v1::TensorChunk* chunk = c.mutable_chunk();
    chunk->set_sample_id(1);
    *chunk->mutable_header() = f32_header("gap", 1, 4, 32);
    chunk->mutable_header()->set_payload_bytes(512);
    chunk->set_data(std::string(256, 'x'));
    s->Write(c);
    chunk->clear_header();
    chunk->set_offset(300);  // 256..300 never sent
    chunk->set_last(true);
    s->Write(c);
    v1::ClientMessage huge;
    huge.mutable_chunk()->set_sample_id(2);
    huge.mutable_chunk()->set_data(std::string(6 << 20, 'y'));
    s->Write(huge);
    v1::ServerMessage reply;
    bool gap_seen = false;
    while (s->Read(&reply)) gap_seen |= reply.has_ack() && reply.ack().reason() == "gap";
    CHECK(gap_seen);
    CHECK(s->Finish().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    REQUIRE(eventually([&] {
      const std::string metrics = http_get(daemon.metrics(), "/metrics");
      return metric_value(metrics, "fp8scope_samples_dropped_total", {{"reason", "gap"}}) >= 1 &&
             metric_value(metrics, "fp8scope_samples_dropped_total", {{"reason", "bad_dtype"}}) >= 1 &&
             metric_value(metrics, "fp8scope_samples_dropped_total", {{"reason", "size_mismatch"}}) >= 2;
    }));
  }
  SECTION("a client that vanishes in the middle of a tensor") {
    grpc::ClientContext ctx;
    auto s = stub->Stream(&ctx);
    v1::ClientMessage m;
    *m.mutable_hello() = hello("vanish");
    s->Write(m);
    v1::ServerMessage reply;
    s->Read(&reply);  // Welcome: the daemon has the client
    v1::ClientMessage c;
    *c.mutable_chunk()->mutable_header() = f32_header("half", 1, 4, 32);
    c.mutable_chunk()->mutable_header()->set_payload_bytes(512);
    c.mutable_chunk()->set_sample_id(1);
    c.mutable_chunk()->set_data(std::string(256, 'x'));
    auto received = [&] {
      return metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_received_bytes_total", {});
    };
    const double before = received();
    s->Write(c);
    REQUIRE(eventually([&] { return received() >= before + 256; }));  // the half sample is in the daemon
    ctx.TryCancel();
    REQUIRE(eventually([&] {
      return metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total",
                          {{"reason", "client_gone_mid_sample"}}) == 1;
    }));
  }
  SECTION("garbage bytes on the port") {
    const auto colon = daemon.grpc().rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(daemon.grpc().substr(colon + 1))));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    for (int i = 0; i < 5; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
      std::string junk(4096, '\0');
      for (std::size_t k = 0; k < junk.size(); ++k) junk[k] = static_cast<char>((k * 2654435761u) >> 13);
      (void)!write(fd, junk.data(), junk.size());
      close(fd);
    }
  }
  SECTION("thousands of distinct layer names are capped and counted") {
    auto stream = SampleStream::open(to(daemon), hello("many"));
    REQUIRE(stream.ok());
    const std::vector<float> tiny = activation(1, 16, 4.0f);
    for (int i = 0; i < 2000; ++i) {
      REQUIRE(stream.value()->send(f32_header("layer" + std::to_string(i), 1, 1, 16), bytes_of(tiny)).ok());
    }
    REQUIRE(stream.value()->wait_for_acks(60).ok());
    REQUIRE(eventually([&] {
      const std::string metrics = http_get(daemon.metrics(), "/metrics");
      return metric_value(metrics, "fp8scope_samples_analyzed_total", {}) >= 2001 &&
             metric_value(metrics, "fp8scope_series_suppressed_total", {}) > 0 &&
             metric_value(metrics, "fp8scope_series", {}) <= 60;
    }));
  }
  // Whatever happened above, the daemon still serves and kept what it had accepted.
  const ProcessResult status = cli({"status", "--endpoint", daemon.grpc()});
  CHECK(status.exit_code == 0);
  CHECK(eventually([&] {
    const ProcessResult h = cli({"history", "--endpoint", daemon.grpc(), "--run", "good", "--csv"});
    // One row per recipe of the default policy.
    return h.exit_code == 0 && parse_csv(h.out).rows.size() == std::size(kDefaultRecipeKinds);
  }));
  CHECK(daemon.running());
}

TEST_CASE("32 clients at once are all served", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  std::atomic<int> accepted{0}, failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 32; ++c) {
    clients.emplace_back([&, c] {
      auto stream = SampleStream::open(to(daemon), hello("many-clients", static_cast<std::uint32_t>(c)), 30.0);
      if (!stream.ok()) {
        ++failures;
        return;
      }
      const std::vector<float> t = activation(8, 64, static_cast<float>(c));
      for (int step = 0; step < 4; ++step) {
        if (!stream.value()->send(f32_header("blocks." + std::to_string(c % 4) + ".mlp", static_cast<std::uint64_t>(step), 8, 64), bytes_of(t)).ok()) ++failures;
      }
      auto acks = stream.value()->wait_for_acks(60);
      if (!acks.ok()) {
        ++failures;
        return;
      }
      for (const auto& [id, ack] : acks.value()) accepted += ack.outcome() == v1::SAMPLE_OUTCOME_ACCEPTED;
      if (!stream.value()->close().ok()) ++failures;
    });
  }
  for (auto& t : clients) t.join();
  CHECK(failures == 0);
  CHECK(accepted == 128);
  CHECK(eventually([&] {
    return metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_analyzed_total", {}) == 128;
  }));
}

TEST_CASE("an unreachable daemon gives every command one clear line, at once, and exit code 1", "[daemon]") {
  TempDir dir;
  const std::string file = dir.write("t.npy", npy_file("<f4", false, "(2,)", floats({1, 2})));
  const std::vector<std::vector<std::string>> commands = {
      {"status"}, {"tensors"}, {"policy", "get"}, {"history"}, {"history", "--csv"},
      {"push", file, "--layer", "l", "--operand", "x"},
      {"log", "--run", "r", "--step", "1", "--name", "loss", "--value", "2.5"}};
  for (std::vector<std::string> args : commands) {
    INFO(args[0]);
    // A refused connection fails at once whatever --timeout allows (push and log used to wait it out).
    args.insert(args.end(), {"--endpoint", "127.0.0.1:1", "--timeout", "600"});
    const ProcessResult r = cli(args, 60.0);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());  // no table header before the error
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find("cannot reach fp8scoped at 127.0.0.1:1: nothing is listening there (connection refused). "
                     "Is fp8scoped running there? Pass --endpoint") != std::string::npos);
    CHECK(r.err.find("ipv4:") == std::string::npos);  // gRPC's own text stays out
  }
  const ProcessResult no_socket = cli({"status", "--endpoint", "unix://" + dir.file("none.sock")});
  CHECK(no_socket.err.find(": no socket at that path.") != std::string::npos);
  // Arguments are checked before any connection is tried.
  const ProcessResult sort = cli({"tensors", "--sort", "foo", "--endpoint", "127.0.0.1:1"});
  CHECK(sort.exit_code == 2);
  CHECK(sort.err.find("--sort: foo not in {underflow,overflow,mse,cosine}") != std::string::npos);
  CHECK(sort.err.find("cannot reach") == std::string::npos);
  const ProcessResult recipe = cli({"history", "--recipe", "nvfp5", "--endpoint", "127.0.0.1:1"});
  CHECK(recipe.exit_code == 2);
  CHECK(recipe.err.find("cannot reach") == std::string::npos);
}

TEST_CASE("fp8scoped refuses to listen beyond loopback unprotected, and documents every option", "[daemon]") {
  TempDir dir;
  const ProcessResult refused = run_process({FP8SCOPE_DAEMON, "--listen", "0.0.0.0:0", "--data-dir", dir.file("d")});
  CHECK(refused.exit_code == 1);
  CHECK((refused.out + refused.err).find("refusing to listen on 0.0.0.0:0 without TLS or a token") != std::string::npos);
  const ProcessResult help = run_process({FP8SCOPE_DAEMON, "--help"});
  CHECK(help.exit_code == 0);
  for (const char* option : {"--listen", "--metrics", "--data-dir", "--backend", "--config", "--tls-cert", "--token-file",
                             "--insecure", "--drain-seconds", "--max-series"}) {
    CHECK(help.out.find(option) != std::string::npos);
  }
}

TEST_CASE("a data dir the daemon's user cannot write is a start-up error naming path, user and permission", "[daemon]") {
  // As a Kubernetes hostPath that kubelet created as root, run by UID 65532. Root writes anywhere,
  // so as root the daemon is started as 65532 (setpriv); as anyone else, as them.
  TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                               std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                               std::filesystem::perms::others_exec);
  const std::string state = dir.file("state");
  std::filesystem::create_directory(state);
  std::filesystem::permissions(state, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec |
                                          std::filesystem::perms::group_read | std::filesystem::perms::group_exec |
                                          std::filesystem::perms::others_read | std::filesystem::perms::others_exec);
  const bool root = geteuid() == 0;
  const std::string uid = root ? "65532" : std::to_string(geteuid());
  std::vector<std::string> command;
  if (root) command = {"/usr/bin/setpriv", "--reuid=65532", "--regid=65532", "--clear-groups"};
  for (const std::string& data : {state, state + "/nested"}) {
    INFO(data);
    std::vector<std::string> args = command;
    for (const std::string& a : {std::string(FP8SCOPE_DAEMON), std::string("--data-dir"), data, std::string("--listen"),
                                 std::string("127.0.0.1:0"), std::string("--metrics"), std::string("127.0.0.1:0"),
                                 std::string("--backend"), std::string("cpu")}) {
      args.push_back(a);
    }
    const ProcessResult r = run_process(args);
    const std::string said = r.out + r.err;
    INFO(said);
    CHECK(r.exit_code == 1);
    CHECK(said.find("--data-dir " + data + ": uid " + uid) != std::string::npos);
    CHECK(said.find("Permission denied") != std::string::npos);
    CHECK(said.find("mode 0555") != std::string::npos);
    CHECK(said.find("unable to open database file") == std::string::npos);
  }
}

TEST_CASE("a gRPC or metrics port already in use is a start-up error, not a shared port", "[daemon]") {
  TempDir dir;
  DaemonProcess first(dir.file("first"));
  const ProcessResult grpc_taken = run_process(
      {FP8SCOPE_DAEMON, "--listen", first.grpc(), "--metrics", "127.0.0.1:0", "--data-dir", dir.file("second")}, {}, 30);
  CHECK(grpc_taken.exit_code == 1);
  CHECK((grpc_taken.out + grpc_taken.err).find("--listen " + first.grpc() + ": cannot listen: the address is in use") !=
        std::string::npos);
  const ProcessResult metrics_taken = run_process(
      {FP8SCOPE_DAEMON, "--listen", "127.0.0.1:0", "--metrics", first.metrics(), "--data-dir", dir.file("third")}, {}, 30);
  CHECK(metrics_taken.exit_code == 1);
  CHECK((metrics_taken.out + metrics_taken.err).find("--metrics " + first.metrics() + ": cannot listen") !=
        std::string::npos);
  // The first daemon still answers every status call alone.
  for (int i = 0; i < 4; ++i) CHECK(cli({"status", "--endpoint", first.grpc()}).exit_code == 0);
}

TEST_CASE("a forward GEMM's X and W give its FP8 output error", "[daemon][gemm]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"), {"--backend", "cpu"});
  auto stream = SampleStream::open(to(daemon), hello("gemm"));
  REQUIRE(stream.ok());
  const std::vector<float> x = activation(32, 64, 5.0f), w = activation(48, 64, 6.0f);
  v1::TensorHeader hx = f32_header("blocks.1.mlp.fc1", 3, 32, 64);
  v1::TensorHeader hw = f32_header("blocks.1.mlp.fc1", 3, 48, 64);
  hw.set_operand(v1::OPERAND_W);
  REQUIRE(stream.value()->send(hx, bytes_of(x)).ok());
  REQUIRE(stream.value()->send(hw, bytes_of(w)).ok());
  REQUIRE(stream.value()->wait_for_acks(30).ok());
  const std::map<std::string, std::string> labels = {{"job", "test"}, {"layer", "blocks.1.mlp.fc1"}, {"accumulate", "emulated"}};
  std::string metrics;
  REQUIRE(eventually([&] {
    metrics = http_get(daemon.metrics(), "/metrics");
    return !std::isnan(metric_value(metrics, "fp8scope_gemm_output_mse", labels));
  }));
  const double cosine = metric_value(metrics, "fp8scope_gemm_output_cosine_similarity", labels);
  CHECK(cosine > 0.9);
  CHECK(cosine <= 1.0);
  CHECK(metric_value(metrics, "fp8scope_gemm_output_max_rel_error", labels) > 0.0);
  // The same comparison from the library the daemon used: the numbers agree.
  auto expected = gemm_check_cpu(TensorView{x.data(), DType::kF32, 32, 64, 1.0f}, TensorView{w.data(), DType::kF32, 48, 64, 1.0f},
                                 CastFormat::kE4M3);
  REQUIRE(expected.ok());
  CHECK(metric_value(metrics, "fp8scope_gemm_output_mse", labels) == Approx(expected.value().mse).epsilon(1e-12));
}

// Issue 26, 5 and 8: a second daemon on a data dir in use, and data-dir files that are links.
TEST_CASE("a second daemon on a data dir in use is refused, naming the first, and touches nothing there", "[daemon]") {
  TempDir dir;
  const std::string data = dir.file("data");
  DaemonProcess first(data);
  const auto journal_time = std::filesystem::last_write_time(data + "/accepted.journal");
  const auto socket_inode = [&] {
    struct stat st {};
    return ::lstat((data + "/shared-memory.sock").c_str(), &st) == 0 ? st.st_ino : 0;
  };
  const ino_t socket_before = socket_inode();
  const ProcessResult second = run_process({FP8SCOPE_DAEMON, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                                            "--data-dir", data, "--backend", "cpu"});
  CHECK(second.exit_code == 1);
  CHECK((second.out + second.err).find("another fp8scoped (pid " + std::to_string(first.pid()) + ") uses it") !=
        std::string::npos);
  CHECK(std::filesystem::last_write_time(data + "/accepted.journal") == journal_time);
  CHECK(socket_inode() == socket_before);
  CHECK(first.running());
  CHECK(cli({"status", "--endpoint", first.grpc()}).exit_code == 0);
}

TEST_CASE("history and journal files that are symbolic links are refused, and nothing is written through them", "[daemon]") {
  TempDir dir;
  for (const char* name : {"history.sqlite", "accepted.journal"}) {
    INFO(name);
    const std::string data = dir.file(std::string("data-") + name), target = dir.file(std::string("target-") + name);
    std::filesystem::create_directories(data);
    REQUIRE(symlink(target.c_str(), (data + "/" + name).c_str()) == 0);
    const ProcessResult refused = run_process({FP8SCOPE_DAEMON, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                                               "--data-dir", data, "--backend", "cpu"});
    CHECK(refused.exit_code == 1);
    CHECK((refused.out + refused.err).find("a symbolic link") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(target));
  }
}

// Issue 26, 14: numbers outside what an option means are usage errors, not queries that wrap.
TEST_CASE("negative, wrapping and NaN numbers are usage errors, and a huge timeout still reaches the daemon", "[daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  const std::vector<std::vector<std::string>> refused = {
      {"history", "--min-step", "-5"},
      {"history", "--max-step", "-1"},
      {"history", "--max-step", "18446744073709551616"},
      {"history", "--max-step", "9223372036854775808"},
      {"history", "--timeout", "nan"},
      {"status", "--timeout", "-1"},
      {"log", "--run", "r", "--step", "-1", "--value", "1"},
      {"policy", "set", "--start-step", "-3"},
      {"policy", "set", "--bytes-per-step", "-1"}};
  for (std::vector<std::string> args : refused) {
    args.insert(args.end(), {"--endpoint", daemon.grpc()});
    INFO(args[0] << " " << args[1] << " " << args[2]);
    const ProcessResult r = cli(args);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("expected") != std::string::npos);
    CHECK(r.err.find("cannot reach") == std::string::npos);
  }
  const ProcessResult patient = cli({"history", "--endpoint", daemon.grpc(), "--timeout", "1e300", "--max-step", "9223372036854775807"});
  CHECK(patient.exit_code == 0);
  CHECK(patient.err.empty());
}
