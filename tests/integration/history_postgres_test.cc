// One job on two nodes, one PostgreSQL: each node's fp8scoped writes the ranks it serves into the
// same database, and one report answers for the whole job, read from the database or through
// either daemon. A daemon killed mid-run, a database that goes away while the job runs, and
// --history values that cannot work, all through the real binaries and a real PostgreSQL.
#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/csv_table.h"
#include "support/daemon_fixture.h"
#include "support/daemon_samples.h"
#include "support/postgres_server.h"
#include "support/temp_dir.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/daemon_client/sample_stream.h"

using namespace fp8scope;
using namespace fp8scope::testing;
using nlohmann::json;

namespace {

constexpr int kSteps = 30, kRows = 64, kCols = 64;
constexpr int kRecipes = static_cast<int>(std::size(kDefaultRecipeKinds));  // the default policy's

PostgresServer& postgres() {
  static PostgresServer server;
  return server;
}

std::vector<float> activation(int seed, int n = kRows * kCols) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(((i + 7u * seed) * 2654435761u) % 2000) / 500.0f - 2.0f;
  return v;
}

std::span<const std::uint8_t> bytes_of(const std::vector<float>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(float)};
}

// One rank of run `run` on `host`: its layers' activations at every step and, on rank 0, the loss.
void stream_rank(const DaemonProcess& d, const std::string& run, std::uint32_t rank, const std::string& host,
                 const std::vector<std::string>& layers, bool with_loss) {
  v1::Hello hello = make_hello("job", run, rank, 2, 100 + rank);
  hello.set_host(host);
  auto stream = SampleStream::open(to(d), hello);
  REQUIRE(stream.ok());
  for (int step = 0; step < kSteps; ++step) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      REQUIRE(stream.value()->send(f32_header(layers[l], static_cast<std::uint64_t>(step), kRows, kCols),
                                   bytes_of(activation(step * 10 + static_cast<int>(l)))).ok());
    }
    if (with_loss) REQUIRE(stream.value()->send_scalar(static_cast<std::uint64_t>(step), "loss", 3.0 - 0.01 * step).ok());
  }
  REQUIRE(stream.value()->wait_for_acks(120).ok());
  REQUIRE(stream.value()->close().ok());
}

// `fp8scope history --csv` over the database, read back by a strict RFC 4180 reader.
CsvTable history_rows(const std::string& url, const std::string& run) {
  const ProcessResult r = cli({"history", "--history", url, "--run", run, "--csv", "--limit", "1000000"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return parse_csv(r.out);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("two nodes' daemons write one run into one PostgreSQL, and one report answers for the whole job",
          "[history][postgres]") {
  TempDir dir;
  const std::string url = postgres().create_database();
  DaemonProcess node0(dir.file("node0"), {"--history", url});
  DaemonProcess node1(dir.file("node1"), {"--history", url});
  stream_rank(node0, "fp8", 0, "gpu-node-0", {"blocks.0.attn.qkv", "blocks.1.attn.qkv"}, true);
  stream_rank(node1, "fp8", 1, "gpu-node-1", {"blocks.2.mlp.fc1", "blocks.3.mlp.fc1"}, false);
  stream_rank(node0, "bf16", 0, "gpu-node-0", {}, true);
  const int expected = kRecipes * kSteps * 4;
  REQUIRE(eventually([&] { return history_rows(url, "fp8").rows.size() == static_cast<std::size_t>(expected); }, 120));

  // Both nodes' rows, each with its host and rank.
  std::map<std::string, int> by_host;
  const CsvTable fp8 = history_rows(url, "fp8");
  for (std::size_t r = 0; r < fp8.rows.size(); ++r) ++by_host[fp8.at(r, "host") + "/" + fp8.at(r, "rank")];
  CHECK(by_host["gpu-node-0/0"] == expected / 2);
  CHECK(by_host["gpu-node-1/1"] == expected / 2);
  // Each daemon says where its history goes, never with a password.
  CHECK_THAT(cli({"status", "--endpoint", node1.grpc()}).out, Catch::Contains("records in " + url));

  // compare over the database: rank 0's loss from node 0, the tensors of both. The baseline's
  // loss is acknowledged once queued, so its last points may still be on their way to the table.
  json compared;
  REQUIRE(eventually([&] {
    const ProcessResult direct = cli({"compare", "--history", url, "--run", "fp8", "--baseline", "bf16", "--json"});
    if (direct.exit_code != 0) return false;
    compared = json::parse(direct.out);
    return compared["baseline"]["points"] == kSteps;
  }, 120));
  CHECK(compared["run"]["points"] == kSteps);
  // The same answer through either daemon's Admin API, from a machine with nothing mounted.
  for (const DaemonProcess* d : {&node0, &node1}) {
    const ProcessResult remote = cli({"compare", "--endpoint", d->grpc(), "--run", "fp8", "--baseline", "bf16", "--json"});
    INFO(remote.err);
    REQUIRE(remote.exit_code == 0);
    CHECK(json::parse(remote.out) == compared);
  }

  // One report of the whole job: every layer of both nodes is in it.
  const std::string report = dir.file("job.html");
  const ProcessResult r = cli({"report", "--history", url, "--run", "fp8", "--baseline", "bf16", "-o", report});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string html = read_file(report);
  for (const char* layer : {"blocks.0.attn.qkv", "blocks.1.attn.qkv", "blocks.2.mlp.fc1", "blocks.3.mlp.fc1"}) {
    CHECK_THAT(html, Catch::Contains(layer));
  }
  const ProcessResult advice = cli({"advise", "--endpoint", node1.grpc(), "--run", "fp8", "--format", "json"});
  INFO(advice.err);
  CHECK(advice.exit_code == 0);
  CHECK_THAT(advice.out, Catch::Contains("blocks.0.attn.qkv") && Catch::Contains("blocks.3.mlp.fc1"));
}

TEST_CASE("every query of the history-by-step dashboard runs on a job's database, as compose's read-only Grafana user, "
          "and plots the run",
          "[history][postgres]") {
  TempDir dir;
  const std::string url = postgres().create_database();
  const std::string database = url.substr(url.rfind('/') + 1);
  // What the compose stack's PostgreSQL runs once: Grafana's read-only user, before fp8scoped's tables.
  postgres().sql_file(database, std::string(FP8SCOPE_SOURCE_DIR) + "/deploy/compose/postgres-init.sql");
  {
    DaemonProcess node(dir.file("node"), {"--history", url});
    stream_rank(node, "fp8", 0, "gpu-node-0", {"blocks.0.attn.qkv"}, true);
    stream_rank(node, "bf16", 0, "gpu-node-0", {"blocks.0.attn.qkv"}, true);
    REQUIRE(node.stop(SIGTERM) == 0);  // a clean stop writes everything
  }
  const json board = json::parse(read_file(std::string(FP8SCOPE_SOURCE_DIR) +
                                           "/dashboards/grafana-postgresql/fp8scope-history.json"));
  std::map<std::string, std::string> values = {{"run", "fp8"},          {"baseline", "bf16"}, {"loss", "loss"},
                                               {"layer", "blocks.0.attn.qkv"}, {"gemm", "fprop"},  {"operand", "x"},
                                               {"recipe", "tensor_delayed"}};
  // Grafana's ${name:sqlstring} is the value quoted as an SQL string; ${name} the value as it is.
  auto interpolate = [&](std::string q) {
    for (const auto& [name, value] : values) {
      for (std::size_t at; (at = q.find("${" + name + ":sqlstring}")) != std::string::npos;) {
        q.replace(at, name.size() + 13, "'" + value + "'");
      }
      for (std::size_t at; (at = q.find("${" + name + "}")) != std::string::npos;) q.replace(at, name.size() + 3, value);
    }
    return q;
  };
  std::vector<std::string> statistics;
  for (const json& v : board["templating"]["list"]) {
    if (v["type"] == "query") {
      INFO("variable " << v["name"]);
      CHECK(!postgres().sql(database, interpolate(v["query"]), "grafana_reader").empty());
    }
    if (v["name"] == "statistic") {
      for (const json& o : v["options"]) statistics.push_back(o["value"]);
    }
  }
  REQUIRE(statistics.size() >= 5);
  for (const std::string& statistic : statistics) {  // every column the statistic variable offers exists
    values["statistic"] = statistic;
    for (const json& p : board["panels"]) {
      for (const json& t : p["targets"]) {
        INFO(p["title"] << " " << t["refId"] << " with statistic " << statistic);
        const std::string rows = postgres().sql(database, interpolate(t["rawSql"]), "grafana_reader");
        // The GEMM check needs a layer's X and W at one step: this job sent activations only.
        if (t["refId"] == "A" && p["title"] != "GEMM output cosine similarity") CHECK(!rows.empty());
        if (p["title"] == "Loss") CHECK(std::count(rows.begin(), rows.end(), '\n') == kSteps);
      }
    }
  }  // A statistic crafted in the dashboard's URL (Grafana accepts any value there) runs as nothing:
  // were it interpolated as a column name, this one would read the session's user.
  values["statistic"] = "amax), current_user::text AS who, MAX(stat_amax";
  for (const json& p : board["panels"]) {
    for (const json& t : p["targets"]) {
      INFO(p["title"] << " " << t["refId"] << " with a crafted statistic");
      CHECK_THAT(postgres().sql(database, interpolate(t["rawSql"]), "grafana_reader"),
                 !Catch::Contains("grafana_reader"));
    }
  }
}

TEST_CASE("killed right after its last ACCEPTED ack, a daemon writing to PostgreSQL counts exactly what it did not store",
          "[history][postgres]") {
  TempDir dir;
  const std::string url = postgres().create_database();
  constexpr int kSamples = 200;
  // One analysis worker on one thread, and 1 MiB samples: analysis falls behind the acks (which
  // come once a sample is queued), so the kill finds some queued and unstored. With every core
  // analyzing, a fast machine once stored all 200 before the kill.
  auto daemon = std::make_unique<DaemonProcess>(
      dir.file("data"),
      std::vector<std::string>{"--history", url, "--analysis-workers", "1", "--engine-threads", "1"});
  {
    auto stream = SampleStream::open(to(*daemon), make_hello("job", "killed", 0, 1, 1));
    REQUIRE(stream.ok());
    const std::vector<float> big = activation(1, 512 * 512);
    for (int step = 0; step < kSamples; ++step) {
      REQUIRE(stream.value()->send(f32_header("blocks.0.mlp", static_cast<std::uint64_t>(step), 512, 512), bytes_of(big)).ok());
    }
    auto acks = stream.value()->wait_for_acks(120);
    REQUIRE(acks.ok());
    int accepted = 0;
    for (const auto& [id, ack] : acks.value()) accepted += ack.outcome() == v1::SAMPLE_OUTCOME_ACCEPTED;
    REQUIRE(accepted == kSamples);
    daemon->stop(SIGKILL);
  }
  daemon = std::make_unique<DaemonProcess>(dir.file("data"), std::vector<std::string>{"--history", url});
  std::map<std::string, int> records_by_step;
  const CsvTable killed = history_rows(url, "killed");
  for (std::size_t r = 0; r < killed.rows.size(); ++r) ++records_by_step[killed.at(r, "step")];
  int stored = 0;
  for (const auto& [step, n] : records_by_step) stored += n == kRecipes;
  const int lost = kSamples - stored;
  INFO(stored << " of " << kSamples << " acknowledged samples stored before the kill");
  CHECK(lost > 0);  // else the kill came too late to test anything
  CHECK(metric_value(http_get(daemon->metrics(), "/metrics"), "fp8scope_acknowledged_samples_lost_total", {}) == lost);
  CHECK_THAT(cli({"status", "--endpoint", daemon->grpc()}).out,
             Catch::Contains("LOST BEFORE THIS START " + std::to_string(lost) + " "));
}

TEST_CASE("stopped while PostgreSQL is down, a daemon leaves what it could not store for its next start to count",
          "[history][postgres]") {
  TempDir dir;
  const std::string url = postgres().create_database();
  constexpr int kSamples = 150;
  {
    DaemonProcess daemon(dir.file("data"), {"--history", url});
    auto stream = SampleStream::open(to(daemon), make_hello("job", "outage-stop", 0, 1, 1));
    REQUIRE(stream.ok());
    postgres().stop();
    for (int step = 0; step < kSamples; ++step) {
      REQUIRE(stream.value()->send(f32_header("blocks.0.mlp", static_cast<std::uint64_t>(step), kRows, kCols),
                                   bytes_of(activation(step))).ok());
    }
    auto acks = stream.value()->wait_for_acks(60);
    REQUIRE(acks.ok());
    int accepted = 0;
    for (const auto& [id, ack] : acks.value()) accepted += ack.outcome() == v1::SAMPLE_OUTCOME_ACCEPTED;
    REQUIRE(accepted == kSamples);
    CHECK(eventually([&] { return metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_samples_analyzed_total", {}) == kSamples; }));
    daemon.stop(SIGTERM);  // the history's last write fails: nothing of this run is stored
    CHECK_THAT(daemon.log(), Catch::Contains(std::to_string(kSamples) + " samples acknowledged as accepted were not stored"));
  }
  postgres().start();
  DaemonProcess next(dir.file("data"), {"--history", url});
  CHECK(history_rows(url, "outage-stop").rows.empty());
  CHECK(metric_value(http_get(next.metrics(), "/metrics"), "fp8scope_acknowledged_samples_lost_total", {}) == kSamples);
}

TEST_CASE("a PostgreSQL that goes away mid-run: the daemon keeps analyzing and exporting, holds the records, says so, "
          "and writes them all when it is back",
          "[history][postgres]") {
  TempDir dir;
  const std::string url = postgres().create_database();
  DaemonProcess daemon(dir.file("data"), {"--history", url});
  auto metric = [&](const std::string& name) { return metric_value(http_get(daemon.metrics(), "/metrics"), name, {}); };
  auto stream = SampleStream::open(to(daemon), make_hello("job", "outage", 0, 1, 1));
  REQUIRE(stream.ok());
  auto send_steps = [&](int from, int to_step) {
    for (int step = from; step < to_step; ++step) {
      REQUIRE(stream.value()->send(f32_header("blocks.0.mlp", static_cast<std::uint64_t>(step), kRows, kCols), bytes_of(activation(step))).ok());
    }
    REQUIRE(stream.value()->wait_for_acks(60).ok());
  };
  send_steps(0, 10);
  REQUIRE(eventually([&] { return metric("fp8scope_records_stored_total") == 10 * kRecipes; }));

  postgres().stop();
  send_steps(10, 30);
  // Analysis and metrics go on; the records wait, counted, and the operator is told.
  CHECK(eventually([&] { return metric("fp8scope_samples_analyzed_total") == 30; }));
  CHECK(eventually([&] { return metric("fp8scope_history_write_failing") == 1; }));
  CHECK(metric("fp8scope_history_pending_records") >= 20 * kRecipes);
  CHECK(metric("fp8scope_history_records_lost_total") == 0);
  const ProcessResult failing = cli({"status", "--endpoint", daemon.grpc()});
  CHECK_THAT(failing.out, Catch::Contains("WRITES FAILING") && Catch::Contains("records waiting, retried"));

  postgres().start();
  CHECK(eventually([&] { return metric("fp8scope_history_write_failing") == 0; }, 60));
  CHECK(eventually([&] { return history_rows(url, "outage").rows.size() == 30u * kRecipes; }, 60));
  CHECK(metric("fp8scope_history_pending_records") == 0);
  CHECK(cli({"status", "--endpoint", daemon.grpc()}).out.find("WRITES FAILING") == std::string::npos);
  REQUIRE(stream.value()->close().ok());
}

TEST_CASE("a --history that cannot work stops the daemon at start with the reason", "[history][postgres]") {
  TempDir dir;
  // The daemon logs to stdout: its last line is the reason.
  auto start = [&](const std::string& history) {
    ProcessResult r = run_process({FP8SCOPE_DAEMON, "--data-dir", dir.file("data"), "--listen", "127.0.0.1:0",
                                   "--metrics", "127.0.0.1:0", "--history", history},
                                  {}, 60);
    r.err = r.out + r.err;
    return r;
  };
  const ProcessResult scheme = start("mysql://db/fp8");
  CHECK(scheme.exit_code != 0);
  CHECK_THAT(scheme.err, Catch::Contains("unknown scheme 'mysql'"));

  const ProcessResult refused = start("postgresql://fp8scope:secret@127.0.0.1:" + std::to_string(free_port()) + "/db");
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Catch::Contains("cannot connect to PostgreSQL at postgresql://fp8scope:***@127.0.0.1:"));
  CHECK_THAT(refused.err, !Catch::Contains("secret"));

  const std::string url = postgres().create_database();
  { DaemonProcess once(dir.file("once"), {"--history", url}); }
  postgres().sql(url.substr(url.rfind('/') + 1), "INSERT INTO fp8scope.schema_version VALUES (7, 0)");
  const ProcessResult newer = start(url);
  CHECK(newer.exit_code != 0);
  CHECK_THAT(newer.err, Catch::Contains("schema is version 7, newer than this fp8scope knows"));
}
