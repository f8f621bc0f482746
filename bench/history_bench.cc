// How fast the history takes records, into SQLite and into PostgreSQL, measured in the same run:
//  - Store/<backend>: records per second through HistoryStore (batches of the writer queue, one
//    transaction each) from one writer: what the database absorbs from one daemon.
//  - Daemon/<backend>/<side>: records per second one in-process fp8scoped (CPU engine) stores while
//    it analyzes <side> x <side> f32 samples at full speed, every recipe of the default policy:
//    16x16 is bookkeeping-bound (the most records one daemon can produce), 1024x1024 a realistic
//    activation tile (the analysis sets the pace).
// Counters: "x_sqlite" is a backend's rate over SQLite's in the same benchmark; on Store/postgresql,
// "nodes_per_database" is its rate over a daemon's at 1024x1024 and "nodes_per_database_worst" over
// a daemon's at 16x16: the nodes one database serves when every daemon writes at full analysis speed.
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "../tests/support/postgres_server.h"
#include "fp8scope/daemon/daemon.h"
#include "fp8scope/daemon_client/daemon_channel.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/kernels/statistics_table.h"

using namespace fp8scope;

namespace {

constexpr int kStoreRecords = 20000;
constexpr int kDaemonSamples = 1500;
std::map<std::string, double> g_store_rate;
std::map<std::pair<std::string, int>, double> g_daemon_rate;  // (backend, side)

testing::PostgresServer& postgres() {
  static testing::PostgresServer server;
  return server;
}

std::string location(const std::string& backend, const testing::TempDir& dir) {
  return backend == "sqlite" ? dir.path() : postgres().create_database();
}

// A record as the daemon writes one: every statistic, the 49-bin histogram.
history::HistoryRecord record(int i) {
  history::HistoryRecord r;
  r.time = 1.8e9 + i;
  r.job = "bench";
  r.run = "fp8";
  r.host = "gpu-node-0";
  r.rank = static_cast<std::uint32_t>(i % 8);
  r.step = static_cast<std::uint64_t>(i / 3072);
  r.layer = "blocks." + std::to_string(i % 128) + ".mlp.fc1";
  r.gemm = GemmRole::kFprop;
  r.operand = Operand::kX;
  r.dtype = DType::kBF16;
  r.numel = 1 << 24;
  r.caster = Caster::recipe(kDefaultRecipeKinds[i % std::size(kDefaultRecipeKinds)]);
  r.format = CastFormat::kE4M3;
  r.scale = 448.0 / (1 + i % 97);
  r.scale_current = r.scale * 1.01;
  for (std::size_t k = 0; k < statistics().size(); ++k) r.statistics.push_back(1.0 / (1 + k + i % 13));
  r.histogram.assign(49, static_cast<std::uint64_t>(i));
  return r;
}

void set_ratio(benchmark::State& state, const std::map<std::string, double>& rates, const std::string& backend) {
  if (rates.count("sqlite") && rates.at("sqlite") > 0) state.counters["x_sqlite"] = rates.at(backend) / rates.at("sqlite");
}

void BM_Store(benchmark::State& state, const std::string& backend) {
  double seconds = 0;
  std::int64_t records = 0;
  for (auto _ : state) {
    state.PauseTiming();
    testing::TempDir dir;
    auto store = std::move(history::HistoryStore::open(location(backend, dir), {"bench:/data", 0})).value();
    std::vector<history::HistoryRecord> batch;
    for (int i = 0; i < kStoreRecords; ++i) batch.push_back(record(i));
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    for (history::HistoryRecord& r : batch) store->add(std::move(r));
    if (!store->flush().ok()) state.SkipWithError("flush failed");
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    records += kStoreRecords;
    state.PauseTiming();
    store.reset();
    state.ResumeTiming();
  }
  g_store_rate[backend] = static_cast<double>(records) / seconds;
  state.counters["records_per_s"] = g_store_rate[backend];
  set_ratio(state, g_store_rate, backend);
  if (backend == "postgresql") {
    if (const double node = g_daemon_rate[{"postgresql", 1024}]; node > 0) state.counters["nodes_per_database"] = g_store_rate[backend] / node;
    if (const double node = g_daemon_rate[{"postgresql", 16}]; node > 0) {
      state.counters["nodes_per_database_worst"] = g_store_rate[backend] / node;
    }
  }
}

std::uint64_t records_stored(const std::shared_ptr<grpc::Channel>& channel) {
  auto admin = v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  v1::DaemonStatus status;
  return admin->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok() ? status.records_stored() : 0;
}

void BM_Daemon(benchmark::State& state, const std::string& backend) {
  spdlog::set_level(spdlog::level::warn);
  const int side = static_cast<int>(state.range(0));
  const int samples = side <= 16 ? kDaemonSamples : 60;
  std::vector<float> values(static_cast<std::size_t>(side) * side);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 2654435761u) % 1000) / 250.0f - 2.0f;
  const std::span<const std::uint8_t> bytes{reinterpret_cast<const std::uint8_t*>(values.data()),
                                            values.size() * sizeof(float)};
  const std::uint64_t per_sample = std::size(kDefaultRecipeKinds);
  double seconds = 0;
  std::uint64_t records = 0;
  for (auto _ : state) {
    state.PauseTiming();
    testing::TempDir dir;
    server::DaemonConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics = "127.0.0.1:0";
    config.data_dir = dir.file("data");
    config.history = backend == "sqlite" ? "" : postgres().create_database();
    config.backend = "cpu";
    auto daemon = server::Daemon::start(config);
    if (!daemon.ok()) {
      state.SkipWithError(daemon.message().c_str());
      return;
    }
    ConnectionOptions to;
    to.endpoint = daemon.value()->grpc_address();
    auto channel = open_channel(to).value();
    auto stream = SampleStream::open(to, make_hello("bench", "fp8", 0, 1, 1));
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < samples; ++i) {
      v1::TensorHeader h;
      h.set_step(static_cast<std::uint64_t>(i / 100));
      h.set_layer("blocks." + std::to_string(i % 100) + ".mlp");
      h.set_gemm(v1::GEMM_FPROP);
      h.set_operand(v1::OPERAND_X);
      h.set_dtype(v1::DTYPE_F32);
      h.add_shape(side);
      h.add_shape(side);
      if (!stream.value()->send(h, bytes).ok()) state.SkipWithError("send failed");
    }
    (void)stream.value()->wait_for_acks(600);
    const std::uint64_t target = per_sample * static_cast<std::uint64_t>(samples);
    while (records_stored(channel) < target) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    records += target;
    state.PauseTiming();
    (void)stream.value()->close();
    daemon.value().reset();
    state.ResumeTiming();
  }
  const double rate = static_cast<double>(records) / seconds;
  g_daemon_rate[{backend, side}] = rate;
  state.counters["records_per_s"] = rate;
  if (const double sqlite = g_daemon_rate[{"sqlite", side}]; sqlite > 0) state.counters["x_sqlite"] = rate / sqlite;
}

// Daemons first: the store's node count divides by a daemon's rate.
BENCHMARK_CAPTURE(BM_Daemon, sqlite, std::string("sqlite"))->Arg(16)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();
BENCHMARK_CAPTURE(BM_Daemon, postgresql, std::string("postgresql"))->Arg(16)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();
BENCHMARK_CAPTURE(BM_Store, sqlite, std::string("sqlite"))->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();
BENCHMARK_CAPTURE(BM_Store, postgresql, std::string("postgresql"))->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
