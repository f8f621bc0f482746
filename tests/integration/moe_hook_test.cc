// A mixture-of-experts job through the real hook, shipper and daemon: tiny_trainer --mode moe
// trains with its expert GEMMs in each form MoE frameworks use (cuBLASLt grouped layouts, whose
// shapes only the device knows; cublasGemmGroupedBatchedEx; cublasGemmBatchedEx; TE's loop of one
// GEMM per expert with tokens), in BF16 and in MXFP8 (each group's block scales through a device
// array of pointers). The hook changes no loss; every expert's operands reach the daemon named by
// expert, with the statistics `fp8scope analyze` gives for the dumped operands (and their scales);
// experts without tokens are counted and shift no name; metrics stay one series per tensor;
// padding that is not zero is flagged.
#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "support/csv_table.h"
#include "support/daemon_fixture.h"
#include "support/temp_dir.h"

using namespace fp8scope::testing;
using nlohmann::json;

namespace {

const char* const kForms[] = {"lt-grouped", "cublas-grouped", "batched", "loop"};
const char* const kMxfp8Forms[] = {"lt-grouped", "loop"};  // cuBLAS has no block-scaled batched GEMM
const std::string kExpertLayer = "mlp.1.experts#0";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> moe_args(const std::string& form, const std::string& losses, std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--mode", "moe", "--moe-gemm", form, "--experts", "6", "--top-k", "2",
                                   "--batch", "32", "--hidden", "32", "--steps", "30", "--losses", losses};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

ProcessResult plain(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {FP8SCOPE_TINY_TRAINER};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, preload_env(), 300.0);
}

ProcessResult hooked(const DaemonProcess& d, const std::string& run, const std::vector<std::string>& args,
                     std::vector<std::string> run_flags = {}) {
  std::vector<std::string> argv = {FP8SCOPE_CLI, "run", "--endpoint", d.grpc(), "--job", "moe", "--run", run};
  argv.insert(argv.end(), run_flags.begin(), run_flags.end());
  argv.push_back("--");
  argv.push_back(FP8SCOPE_TINY_TRAINER);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, preload_env(), 300.0);
}

// One history record: its place, and the figures the tests read.
struct Row {
  std::string layer, gemm, operand, recipe, scale_layout;
  std::int64_t step = 0, expert = -1, tokens = -1, padding_nonzero = 0, padding_nonfinite = 0;
  double mse = 0, underflow = 0, saturation = 0, block_scale_floor = 0, amax = 0;
};

std::vector<Row> records(const std::string& data_dir, const std::string& run) {
  std::vector<Row> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2((data_dir + "/history.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return out;
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT layer, gemm, operand, recipe, step, expert, expert_tokens, padding_nonzero, "
                     "padding_nonfinite, stat_mse, stat_underflow_ratio, coalesce(scale_layout, ''), "
                     "stat_saturation_ratio, stat_block_scale_floor_ratio, stat_amax FROM records WHERE run = ? ORDER BY id",
                     -1, &q, nullptr);
  sqlite3_bind_text(q, 1, run.c_str(), -1, SQLITE_TRANSIENT);
  auto text = [&](int i) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, i))); };
  auto integer = [&](int i, std::int64_t null) { return sqlite3_column_type(q, i) == SQLITE_NULL ? null : sqlite3_column_int64(q, i); };
  while (sqlite3_step(q) == SQLITE_ROW) {
    out.push_back({text(0), text(1), text(2), text(3), text(11), sqlite3_column_int64(q, 4), integer(5, -1),
                   integer(6, -1), integer(7, 0), integer(8, 0), sqlite3_column_double(q, 9),
                   sqlite3_column_double(q, 10), sqlite3_column_double(q, 12), sqlite3_column_double(q, 13),
                   sqlite3_column_double(q, 14)});
  }
  sqlite3_finalize(q);
  sqlite3_close(db);
  return out;
}

// The experts that had tokens at the dumped step: an expert without tokens dumps nothing.
std::set<int> experts_dumped(const std::string& dump) {
  std::set<int> experts;
  for (int e = 0; e < 6; ++e) {
    if (std::filesystem::exists(dump + "/mlp.1.experts.fprop.x.e" + std::to_string(e) + ".npy")) experts.insert(e);
  }
  return experts;
}

// The expert layer's record of one expert's operand at a step under a recipe; null if none.
const Row* expert_row(const std::vector<Row>& rows, std::int64_t step, const std::string& gemm, const std::string& op,
                      std::int64_t expert, const std::string& recipe) {
  const Row* found = nullptr;
  for (const Row& r : rows) {
    if (r.step == step && r.layer == kExpertLayer && r.gemm == gemm && r.operand == op && r.expert == expert &&
        r.recipe == recipe) {
      found = &r;
    }
  }
  return found;
}

}  // namespace

TEST_CASE("a mixture-of-experts trainer learns in every expert GEMM form, and the hook changes no loss", "[hook][moe]") {
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  std::vector<std::pair<std::string, std::string>> runs;  // recipe, form
  for (const char* form : kForms) runs.emplace_back("bf16", form);
  for (const char* form : kMxfp8Forms) runs.emplace_back("mxfp8", form);
  for (const auto& [recipe, form] : runs) {
    INFO(recipe << " " << form);
    const std::string name = recipe + "-" + form;
    const std::vector<std::string> more = {"--moe-recipe", recipe};
    const ProcessResult alone = plain(moe_args(form, dir.file(name + ".plain"), more));
    REQUIRE(alone.exit_code == 0);
    const ProcessResult under = hooked(daemon, name, moe_args(form, dir.file(name + ".hooked"), more), {"--every", "7"});
    INFO(under.err);
    REQUIRE(under.exit_code == 0);
    const std::vector<std::string> a = lines_of(dir.file(name + ".plain")), b = lines_of(dir.file(name + ".hooked"));
    REQUIRE(a.size() == 30);
    CHECK(a == b);  // bit for bit
    CHECK(std::stod(a.back()) < 0.8 * std::stod(a.front()));
  }
}

TEST_CASE("MXFP8 experts arrive with each group's block scales, as analyze reads their dumps", "[hook][moe]") {
  const std::string form = GENERATE(as<std::string>{}, "lt-grouped", "loop");
  INFO(form);
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  std::filesystem::create_directories(dir.file("dump"));
  const ProcessResult run = hooked(
      daemon, "mxfp8",
      moe_args(form, dir.file("losses"), {"--moe-recipe", "mxfp8", "--dump-step", "14", "--dump-dir", dir.file("dump")}),
      {"--every", "7"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::set<int> with_tokens = experts_dumped(dir.file("dump"));
  REQUIRE(!with_tokens.empty());
  std::vector<Row> rows;
  REQUIRE(eventually([&] {
    rows = records(dir.file("data"), "mxfp8");
    std::size_t found = 0;
    for (const Row& r : rows) found += r.step == 14 && r.layer == kExpertLayer && r.recipe == "observed";
    return found >= with_tokens.size() * 6;
  }));
  const std::map<std::string, std::vector<std::string>> operands = {
      {"fprop", {"x", "w"}}, {"dgrad", {"w", "dy"}}, {"wgrad", {"x", "dy"}}};
  for (const int e : with_tokens) {
    for (const auto& [gemm, ops] : operands) {
      for (const std::string& op : ops) {
        const std::string base = dir.file("dump") + "/mlp.1.experts." + gemm + "." + op + ".e" + std::to_string(e);
        INFO(base);
        const ProcessResult analyze = cli({"analyze", base + ".npy", "--dtype", "e4m3", "--json", "--scale-layout",
                                           "vec32_ue8m0", "--scales", base + ".scales.npy"});
        REQUIRE(analyze.exit_code == 0);
        const json expected = json::parse(analyze.out);
        const Row* got = expert_row(rows, 14, gemm, op, e, "observed");
        REQUIRE(got != nullptr);
        CHECK(got->scale_layout == "vec32_ue8m0");
        CHECK(got->saturation == Approx(expected["saturation_ratio"].get<double>()).epsilon(1e-12));
        CHECK(got->block_scale_floor == Approx(expected["block_scale_floor_ratio"].get<double>()).epsilon(1e-12));
        CHECK(got->amax == Approx(expected["amax"].get<double>()).epsilon(1e-12));
        CHECK(got->tokens > 0);
      }
    }
  }
  // Every group's scales were read: nothing dropped, for lack of room or for the scale mode.
  CHECK(nonzero_series(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_dropped_total").empty());
}

TEST_CASE("every expert's operands reach the daemon by expert, as analyze reads their dumps", "[hook][moe]") {
  const std::string form = GENERATE(as<std::string>{}, "lt-grouped", "cublas-grouped", "batched", "loop");
  INFO(form);
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  std::filesystem::create_directories(dir.file("dump"));
  const ProcessResult run =
      hooked(daemon, "experts", moe_args(form, dir.file("losses"), {"--dump-step", "14", "--dump-dir", dir.file("dump")}),
             {"--every", "7"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::set<int> with_tokens = experts_dumped(dir.file("dump"));
  REQUIRE(!with_tokens.empty());
  const std::map<std::string, std::vector<std::string>> operands = {
      {"fprop", {"x", "w"}}, {"dgrad", {"w", "dy"}}, {"wgrad", {"x", "dy"}}};
  std::vector<Row> rows;
  REQUIRE(eventually([&] {
    rows = records(dir.file("data"), "experts");
    std::size_t found = 0;
    for (const Row& r : rows) found += r.step == 14 && r.layer == kExpertLayer && r.recipe == "tensor_current";
    return found >= with_tokens.size() * 6;
  }));
  for (const int e : with_tokens) {
    for (const auto& [gemm, ops] : operands) {
      for (const std::string& op : ops) {
        const std::string file = dir.file("dump") + "/mlp.1.experts." + gemm + "." + op + ".e" + std::to_string(e) + ".npy";
        INFO(file);
        const ProcessResult analyze = cli({"analyze", file, "--dtype", "bf16", "--json", "--recipe", "tensor_current",
                                           "--format", op == "dy" ? "e5m2" : "e4m3"});
        REQUIRE(analyze.exit_code == 0);
        const json expected = json::parse(analyze.out);
        const Row* got = expert_row(rows, 14, gemm, op, e, "tensor_current");
        REQUIRE(got != nullptr);
        CHECK(got->mse == Approx(expected["mse"].get<double>()).epsilon(1e-12));
        CHECK(got->underflow == expected["underflow_ratio"].get<double>());
        CHECK(got->tokens > 0);
        CHECK(got->padding_nonzero == 0);  // the trainer pads with zeros
      }
    }
  }
  // No other layer name: the experts are named by index, never by an ordinal.
  for (const Row& r : rows) {
    if (r.layer.rfind("mlp.1", 0) == 0) CHECK(r.layer == kExpertLayer);
  }
  // /metrics: one series per tensor (no expert label), the worst expert named, the load.
  const std::string metrics = http_get(daemon.metrics(), "/metrics");
  CHECK(metrics.find("expert=\"") == std::string::npos);
  const double worst = metric_value(metrics, "fp8scope_expert_worst",
                                    {{"job", "moe"}, {"layer", kExpertLayer}, {"gemm", "fprop"}, {"operand", "x"},
                                     {"format", "e4m3"}, {"recipe", "tensor_current"}, {"statistic", "underflow_ratio"}});
  CHECK(worst >= 0);
  CHECK(worst < 6);
  CHECK(metric_value(metrics, "fp8scope_expert_tokens_max", {{"job", "moe"}, {"layer", kExpertLayer}}) > 0);
  // `fp8scope tensors --expert N`: that expert's tensors, each with its tokens.
  const int first = *with_tokens.begin();
  const ProcessResult listed = cli({"tensors", "--endpoint", daemon.grpc(), "--expert", std::to_string(first), "--json"});
  REQUIRE(listed.exit_code == 0);
  std::size_t of_expert = 0;
  for (std::size_t at = 0, end; (end = listed.out.find('\n', at)) != std::string::npos; at = end + 1) {
    const json t = json::parse(listed.out.substr(at, end - at));
    CHECK(t["expert"] == first);
    of_expert += t["key"]["layer"] == kExpertLayer;
  }
  CHECK(of_expert == 6);  // X, W and Dy of fprop, dgrad and wgrad
  // `fp8scope history --expert N`, through the daemon's Admin API: that expert's records only.
  const ProcessResult history = cli({"history", "--endpoint", daemon.grpc(), "--run", "experts", "--expert",
                                     std::to_string(first), "--layer", "experts", "--csv"});
  REQUIRE(history.exit_code == 0);
  const CsvTable history_table = parse_csv(history.out);
  const std::size_t history_rows = history_table.rows.size();
  for (std::size_t r = 0; r < history_rows; ++r) {
    CHECK(history_table.at(r, "expert") == std::to_string(first));
    CHECK(std::stoll(history_table.at(r, "expert_tokens")) > 0);
  }
  CHECK(history_rows >= 6);
  // advise names each expert as a tensor; the report draws the layer's experts against its steps.
  const ProcessResult advice = cli({"advise", "--data-dir", dir.file("data"), "--run", "experts", "--format", "json"});
  REQUIRE(advice.exit_code == 0);
  const json advised_json = json::parse(advice.out);
  std::set<std::string> advised;
  for (const json& t : advised_json["tensors"]) advised.insert(t["layer"].get<std::string>());
  for (const int e : with_tokens) CHECK(advised.count(kExpertLayer + "/expert" + std::to_string(e)) == 1);
  CHECK(advised_json.contains("experts"));
  const std::string html = dir.file("report.html");
  REQUIRE(cli({"report", "--data-dir", dir.file("data"), "--run", "experts", "-o", html}).exit_code == 0);
  const std::string page = read_text(html);
  CHECK(page.find("<h2>Experts</h2>") != std::string::npos);
  CHECK(page.find(" per expert and step (") != std::string::npos);
  for (const int e : with_tokens) CHECK(page.find(">expert " + std::to_string(e) + "</text>") != std::string::npos);
}

TEST_CASE("experts without tokens are counted, and padding that is not zero is flagged", "[hook][moe]") {
  const std::string recipe = GENERATE(as<std::string>{}, "bf16", "mxfp8");
  INFO(recipe);
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  // Sixteen experts, one each, for 32 tokens: some get none. At step 7 one expert's padding is NaN.
  const ProcessResult run = hooked(daemon, "padding",
                                   {"--mode", "moe", "--moe-gemm", "lt-grouped", "--moe-recipe", recipe, "--experts",
                                    "16", "--top-k", "1", "--batch", "32", "--hidden", "32", "--steps", "8",
                                    "--nan-padding-step", "7"},
                                   {"--every", "7"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  std::vector<Row> rows;
  REQUIRE(eventually([&] {
    rows = records(dir.file("data"), "padding");
    for (const Row& r : rows) {
      if (r.step == 7 && r.padding_nonfinite > 0) return true;
    }
    return false;
  }));
  bool flagged = false;
  for (const Row& r : rows) {
    if (r.step == 7 && r.padding_nonfinite > 0) {
      flagged = true;
      CHECK(r.expert >= 0);
      CHECK(r.operand == "x");  // X's padding, read by fprop and by wgrad
    }
    if (r.step == 0) CHECK(r.padding_nonfinite == 0);
  }
  CHECK(flagged);
  const std::string metrics = http_get(daemon.metrics(), "/metrics");
  CHECK(metric_value(metrics, "fp8scope_experts_without_tokens", {{"job", "moe"}, {"layer", kExpertLayer}}) >= 1);
  CHECK(metric_value(metrics, "fp8scope_padding_nonfinite_ratio",
                     {{"job", "moe"}, {"layer", kExpertLayer}, {"gemm", "fprop"}, {"operand", "x"}}) > 0);
}
