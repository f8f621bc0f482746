// One contract, two backends: every case here runs against a SQLite file and against a database in
// a real PostgreSQL server, through the same HistoryStore and HistoryReader calls. What the daemon
// and the CLI rely on: what was added is there after flush, exactly as added; filters and pages;
// tickets tell stored samples from lost ones across restarts; retention; versioned schemas.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <thread>

#include "support/filled_records.h"
#include "support/postgres_server.h"
#include "support/temp_dir.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/kernels/statistics_table.h"

using namespace fp8scope;
using namespace fp8scope::history;
using fp8scope::testing::TempDir;

namespace {

fp8scope::testing::PostgresServer& postgres() {
  static fp8scope::testing::PostgresServer server;
  return server;
}

// A fresh, empty history of the backend under test.
std::string fresh_history(const std::string& backend, const TempDir& dir) {
  return backend == "sqlite" ? dir.path() : postgres().create_database();
}

std::unique_ptr<HistoryStore> open_store(const std::string& location, HistoryStoreOptions options = {}) {
  if (options.writer.empty()) options.writer = "node-a:/data";
  auto store = HistoryStore::open(location, options);
  INFO(store.message());
  REQUIRE(store.ok());
  return std::move(store).value();
}

std::size_t stat_index(const char* key) { return static_cast<std::size_t>(find_statistic(key) - statistics().data()); }

HistoryRecord record(const std::string& run, const std::string& layer, std::uint64_t step, double underflow) {
  HistoryRecord r;
  r.time = 1.0e9 + static_cast<double>(step);
  r.job = "job";
  r.run = run;
  r.host = "node-a";
  r.step = step;
  r.layer = layer;
  r.gemm = GemmRole::kFprop;
  r.operand = Operand::kX;
  r.dtype = DType::kBF16;
  r.numel = 4096;
  r.caster = Caster::recipe(RecipeKind::kTensorCurrent);
  r.format = CastFormat::kE4M3;
  r.scale = 2.0;
  r.statistics.assign(statistics().size(), std::nan(""));
  r.statistics[stat_index("underflow_ratio")] = underflow;
  r.histogram.assign(49, 1);
  return r;
}

std::vector<HistoryRecord> read_all(const HistoryReader& reader, HistoryFilter f = {}) {
  std::vector<HistoryRecord> rows;
  const Status s = reader.query(f, [&](const HistoryRecord& r) {
    rows.push_back(r);
    return true;
  });
  INFO(s.message());
  REQUIRE(s.ok());
  return rows;
}

}  // namespace

TEST_CASE("every field of every record type, as the column lists fill them, comes back equal", "[history]") {
  const std::string backend = GENERATE("sqlite", "postgresql");
  INFO("backend " << backend);
  TempDir dir;
  const std::string location = fresh_history(backend, dir);
  const HistoryRecord r = testing::filled(record_columns());
  const ScalarRecord s = testing::filled(scalar_columns());
  const GemmOutputRecord g = testing::filled(gemm_output_columns());
  {
    auto store = open_store(location);
    store->add(r);
    store->add(s);
    store->add(g);
    REQUIRE(store->flush().ok());
  }
  auto reader = open_history_reader(location);
  REQUIRE(reader.ok());
  std::vector<HistoryRecord> rows = read_all(*reader.value());
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id > 0);
  rows[0].id = 0;
  CHECK(rows[0] == r);
  std::vector<ScalarRecord> scalars;
  REQUIRE(reader.value()->query_scalars("", "", [&](const ScalarRecord& x) {
    scalars.push_back(x);
    return true;
  }).ok());
  CHECK(scalars == std::vector<ScalarRecord>{s});
  std::vector<GemmOutputRecord> outputs;
  REQUIRE(reader.value()->query_gemm_outputs("", [&](const GemmOutputRecord& x) {
    outputs.push_back(x);
    return true;
  }).ok());
  CHECK(outputs == std::vector<GemmOutputRecord>{g});
}

TEST_CASE("records, GEMM outputs and scalars are stored, filtered, paged and kept across reopening", "[history]") {
  const std::string backend = GENERATE("sqlite", "postgresql");
  INFO("backend " << backend);
  TempDir dir;
  const std::string location = fresh_history(backend, dir);
  {
    auto store = open_store(location);
    for (std::uint64_t step = 0; step < 50; ++step) {
      HistoryRecord r = record("fp8", step % 2 ? "blocks.1.attn" : "blocks.0.mlp", step, step / 100.0);
      if (step % 5 == 0) r.operand = Operand::kW;
      if (step % 2 == 0) r.expert = static_cast<std::int64_t>(step % 4), r.expert_tokens = 10;  // blocks.0.mlp: MoE
      store->add(r);
      store->add(ScalarRecord{0, "job", "fp8", "node-a", 0, step, "loss", 3.0 - step * 0.01});
    }
    store->add(GemmOutputRecord{1.0e9, "job", "fp8", "node-a", 0, 7, "blocks.0.mlp", "fp32", 1024, 2.0, 4.0, 1e-4, 0.999, 0.01});
    REQUIRE(store->flush().ok());
    CHECK(store->stored() == 50);
  }
  auto reader = open_history_reader(location);
  INFO(reader.message());
  REQUIRE(reader.ok());
  HistoryFilter f;
  f.layer_regex = "attn$";
  f.min_step = 10;
  f.max_step = 19;
  std::vector<HistoryRecord> rows = read_all(*reader.value(), f);
  REQUIRE(rows.size() == 5);
  CHECK(rows[0].step == 11);
  CHECK(rows[0].layer == "blocks.1.attn");
  CHECK(rows[0].statistics[stat_index("underflow_ratio")] == 0.11);
  CHECK(reader.value()->count(f).value() == 5);

  HistoryFilter weights;
  weights.operand = Operand::kW;
  CHECK(reader.value()->count(weights).value() == 10);
  weights.gemm = GemmRole::kWgrad;
  CHECK(reader.value()->count(weights).value() == 0);

  HistoryFilter expert;  // one expert's records: even steps with step % 4 == 2
  expert.expert = 2;
  CHECK(reader.value()->count(expert).value() == 12);
  for (const HistoryRecord& r : read_all(*reader.value(), expert)) CHECK((r.expert == 2 && r.step % 4 == 2));
  expert.expert = 3;  // odd steps are a dense layer's
  CHECK(reader.value()->count(expert).value() == 0);

  // Pages: after_id continues where the last page ended, in the order records were added.
  HistoryFilter page;
  page.limit = 20;
  std::vector<std::uint64_t> steps;
  for (int pages = 0; pages < 10; ++pages) {
    const std::vector<HistoryRecord> p = read_all(*reader.value(), page);
    for (const HistoryRecord& r : p) steps.push_back(r.step);
    if (p.size() < page.limit) break;
    page.after_id = p.back().id;
  }
  REQUIRE(steps.size() == 50);
  for (std::uint64_t i = 0; i < 50; ++i) CHECK(steps[i] == i);

  int losses = 0;
  REQUIRE(reader.value()->query_scalars("fp8", "loss", [&](const ScalarRecord& s) {
    CHECK(s.host == "node-a");
    return ++losses < 1000;
  }).ok());
  CHECK(losses == 50);
  std::vector<GemmOutputRecord> outputs;
  REQUIRE(reader.value()->query_gemm_outputs("fp8", [&](const GemmOutputRecord& g) {
    outputs.push_back(g);
    return true;
  }).ok());
  REQUIRE(outputs.size() == 1);
  CHECK(outputs[0].accumulate == "fp32");
  CHECK(outputs[0].cosine == 0.999);
  CHECK(outputs[0].max_rel_error == 0.01);

  f = HistoryFilter();
  f.layer_regex = "([bad";
  CHECK(!reader.value()->query(f, [](const HistoryRecord&) { return true; }).ok());
  int seen = 0;  // a reader that stops early gets no error and no more rows
  CHECK(reader.value()->query(HistoryFilter{}, [&](const HistoryRecord&) { return ++seen < 3; }).ok());
  CHECK(seen == 3);
}

TEST_CASE("every field reads back exactly as written", "[history]") {
  const std::string backend = GENERATE("sqlite", "postgresql");
  INFO("backend " << backend);
  TempDir dir;
  const std::string location = fresh_history(backend, dir);
  HistoryRecord r = record("run\twith\ttabs", "blocks.0\\mlp\nnext", 1ull << 62, 1.0 / 3.0);
  r.host = "gpu-node-17";
  r.rank = 63;
  r.gemm = GemmRole::kDgrad;
  r.operand = Operand::kDy;
  r.dtype = DType::kE2M1;
  r.caster = Caster::job();
  r.format = CastFormat::kE2M1;
  r.scale = std::numeric_limits<double>::infinity();
  r.scale_max = 0x1p-127;
  r.scale_current = 448.0 / 3.0;
  r.codes_digest = "0123456789abcdef";
  r.scale_layout = ScaleLayout::kVec16Ue4m3;
  r.gemm_alpha = 0.125;
  r.relative_values = true;
  r.scale_histogram = {0, 5, 1ull << 40};
  r.histogram = {std::numeric_limits<std::uint64_t>::max() >> 1, 0, 7};
  r.statistics[stat_index("amax")] = 1e300;
  {
    auto store = open_store(location);
    store->add(r);
    store->add(record("plain", "l", 1, 0.0));
    REQUIRE(store->flush().ok());
  }
  auto reader = open_history_reader(location);
  REQUIRE(reader.ok());
  const std::vector<HistoryRecord> rows = read_all(*reader.value());
  REQUIRE(rows.size() == 2);
  const HistoryRecord& back = rows[0];
  CHECK(back.run == r.run);
  CHECK(back.layer == r.layer);
  CHECK(back.host == r.host);
  CHECK(back.rank == 63);
  CHECK(back.step == r.step);
  CHECK(back.gemm == GemmRole::kDgrad);
  CHECK(back.operand == Operand::kDy);
  CHECK(back.dtype == DType::kE2M1);
  CHECK(back.caster.is_job());
  CHECK(back.format == CastFormat::kE2M1);
  CHECK(std::isinf(back.scale));
  CHECK(back.scale_max == r.scale_max);
  CHECK(back.scale_current == r.scale_current);
  CHECK(back.codes_digest == r.codes_digest);
  CHECK(back.scale_layout == r.scale_layout);
  CHECK(back.gemm_alpha == 0.125);
  CHECK(back.relative_values);
  CHECK(back.scale_histogram == r.scale_histogram);
  CHECK(back.histogram == r.histogram);
  REQUIRE(back.statistics.size() == statistics().size());
  for (std::size_t k = 0; k < statistics().size(); ++k) {
    INFO(statistics()[k].key);
    if (std::isnan(r.statistics[k])) {
      CHECK(std::isnan(back.statistics[k]));
    } else {
      CHECK(back.statistics[k] == r.statistics[k]);
    }
  }
  // Empty optional fields read back empty.
  CHECK(rows[1].codes_digest.empty());
  CHECK(rows[1].scale_layout == ScaleLayout::kNone);
  CHECK(rows[1].gemm_alpha == 0);
  CHECK_FALSE(rows[1].relative_values);
  CHECK(rows[1].scale_histogram.empty());
}

TEST_CASE("a sample's ticket is committed with its records, and a restart tells stored samples from lost ones",
          "[history]") {
  const std::string backend = GENERATE("sqlite", "postgresql");
  INFO("backend " << backend);
  TempDir dir;
  const std::string location = fresh_history(backend, dir);
  std::vector<SampleTicket> accepted;
  {
    auto store = open_store(location);
    std::vector<std::uint64_t> stored;
    store->on_stored_sample([&](const SampleTicket& t, bool ok) {
      CHECK(ok);
      stored.push_back(t.seq);
    });
    for (std::uint64_t seq = 1; seq <= 3; ++seq) {
      store->add_sample({record("fp8", "blocks.0.mlp", seq, 0.0)}, SampleTicket{77, seq, static_cast<std::uint32_t>(seq)});
      accepted.push_back({77, seq, 0});
    }
    // One batch: the next one deletes these tickets (the journal has released them by then).
    REQUIRE(store->flush().ok());
    CHECK(stored == std::vector<std::uint64_t>{1, 2, 3});
  }
  accepted.push_back({77, 4, 0});  // acknowledged, never reached the history
  accepted.push_back({78, 1, 0});  // another start's sample 1
  auto store = open_store(location);
  auto lost = store->unstored(accepted);
  REQUIRE(lost.ok());
  REQUIRE(lost.value().size() == 2);
  CHECK((lost.value()[0].boot == 77 && lost.value()[0].seq == 4));
  CHECK((lost.value()[1].boot == 78 && lost.value()[1].seq == 1));
  REQUIRE(store->forget_stored_samples().ok());
  CHECK(store->unstored(accepted).value().size() == accepted.size());
}

TEST_CASE("the stored count never trails the records a reader can already see", "[history]") {
  // `fp8scope status` once said "history 0 records" while `fp8scope history` listed rows: the count
  // followed the COMMIT, so a read between the two saw more than stored() said.
  const std::string backend = GENERATE("sqlite", "postgresql");
  INFO("backend " << backend);
  TempDir dir;
  auto store = open_store(fresh_history(backend, dir));
  std::atomic<bool> done{false}, flushed{true};
  std::thread writer([&] {
    for (std::uint64_t step = 1; step <= 200; ++step) {
      store->add(record("race", "l", step, 0.0));
      if (!store->flush().ok()) flushed = false;  // one record per COMMIT: as many windows as possible
    }
    done = true;
  });
  std::uint64_t checks = 0, behind = 0;
  while (!done) {
    const std::uint64_t visible = store->reader().count(HistoryFilter{}).value();
    if (store->stored() < visible) ++behind;
    ++checks;
  }
  writer.join();
  REQUIRE(flushed);
  INFO(checks << " checks");
  CHECK(behind == 0);
  CHECK(store->stored() == 200);
}

TEST_CASE("retention deletes rows older than its days, and counts them", "[history]") {
  const std::string backend = GENERATE("sqlite", "postgresql");
  INFO("backend " << backend);
  TempDir dir;
  const std::string location = fresh_history(backend, dir);
  {
    auto store = open_store(location);
    for (std::uint64_t step = 0; step < 10; ++step) {
      store->add(record("old", "l", step, 0.0));  // written in 2001
      store->add(ScalarRecord{1.0e9, "job", "old", "node-a", 0, step, "loss", 1.0});
    }
    REQUIRE(store->flush().ok());
  }
  HistoryStoreOptions keep_30_days;
  keep_30_days.retention_days = 30;
  auto store = open_store(location, keep_30_days);
  HistoryRecord recent = record("new", "l", 1, 0.0);
  recent.time = static_cast<double>(std::time(nullptr));
  store->add(recent);
  REQUIRE(store->flush().ok());  // the writer's first pass deletes before it writes
  const std::vector<HistoryRecord> rows = read_all(store->reader());
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].run == "new");
  CHECK(store->write_health().expired == 10);
  int scalars = 0;
  REQUIRE(store->reader().query_scalars("", "", [&](const ScalarRecord&) { return ++scalars > 0; }).ok());
  CHECK(scalars == 0);
}

TEST_CASE("a history a newer fp8scope migrated is refused, with what to do", "[history]") {
  const std::string backend = GENERATE("sqlite", "postgresql");
  INFO("backend " << backend);
  TempDir dir;
  const std::string location = fresh_history(backend, dir);
  { open_store(location); }
  if (backend == "sqlite") {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(dir.file("history.sqlite").c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "INSERT INTO schema_version VALUES (99, 0)", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  } else {
    postgres().sql(location.substr(location.rfind('/') + 1), "INSERT INTO fp8scope.schema_version VALUES (99, 0)");
  }
  auto store = HistoryStore::open(location, {"node-a:/data", 0});
  REQUIRE(!store.ok());
  CHECK_THAT(store.message(), Catch::Contains("schema is version 99") && Catch::Contains("Upgrade fp8scope"));
  auto reader = open_history_reader(location);
  REQUIRE(!reader.ok());
  CHECK_THAT(reader.message(), Catch::Contains("version 99"));
}

TEST_CASE("locations that cannot be a history are errors that say what is accepted", "[history]") {
  TempDir dir;
  auto wrong_scheme = open_history_reader("mysql://db/x");
  REQUIRE(!wrong_scheme.ok());
  CHECK_THAT(wrong_scheme.message(), Catch::Contains("unknown scheme 'mysql'") && Catch::Contains("postgresql://"));
  auto nowhere = open_history_reader(dir.file("nowhere"));
  REQUIRE(!nowhere.ok());
  CHECK_THAT(nowhere.message(), Catch::Contains(dir.file("nowhere")) && Catch::Contains("--data-dir"));
  auto unwritable = HistoryStore::open("/proc/fp8scope-cannot-be-here", {});
  REQUIRE(!unwritable.ok());
  CHECK_THAT(unwritable.message(), Catch::Contains("/proc/fp8scope-cannot-be-here"));
  // Nothing listens on port 1: refused at once, with the URL (never its password) in the message.
  auto refused = HistoryStore::open("postgresql://fp8scope:hunter2@127.0.0.1:1/db", {"w", 0});
  REQUIRE(!refused.ok());
  CHECK_THAT(refused.message(), Catch::Contains("cannot connect to PostgreSQL at postgresql://fp8scope:***@127.0.0.1:1/db"));
  CHECK_THAT(refused.message(), !Catch::Contains("hunter2"));
  // Issue 26, 11: no shape of URL shows its password, in fp8scope's words or libpq's.
  struct Shape {
    const char* url;
    const char* password;
  };
  const Shape shapes[] = {
      {"postgresql://fp8scope:c2VjcmV0/K2+Zm9v==@127.0.0.1:1/db", "c2VjcmV0/K2+Zm9v=="},  // base64: '/' and '+'
      {"postgresql://fp8scope:p@ssw0rd@127.0.0.1:1/db", "ssw0rd"},                     // '@' in the password
      {"postgresql://fp8scope:bad%zzpass@127.0.0.1:1/db", "zzpass"},                   // a bad %-escape
      {"postgresql://fp8scope:per%40cent@127.0.0.1:1/db", "per@cent"},                 // %-encoded, decoded by libpq
      {"postgresql+psycopg2://fp8scope:hunter3@127.0.0.1:1/db", "hunter3"},            // a scheme not known
      {"postgresql://127.0.0.1:1/db?user=fp8scope&password=hunter4", "hunter4"}};      // as a parameter
  for (const Shape& shape : shapes) {
    INFO(shape.url);
    auto r = HistoryStore::open(shape.url, {"w", 0});
    REQUIRE(!r.ok());
    CHECK_THAT(r.message(), !Catch::Contains(shape.password));
    auto reader = open_history_reader(shape.url);
    REQUIRE(!reader.ok());
    CHECK_THAT(reader.message(), !Catch::Contains(shape.password));
  }
  // A database fp8scope never wrote is no history to read.
  auto empty = open_history_reader(postgres().create_database());
  REQUIRE(!empty.ok());
  CHECK_THAT(empty.message(), Catch::Contains("no fp8scope history there"));
}

TEST_CASE("a PostgreSQL that goes away mid-run: records wait in memory, counted, and are written when it is back",
          "[history]") {
  TempDir dir;
  const std::string location = postgres().create_database();
  auto store = open_store(location);
  store->add(record("fp8", "l", 1, 0.0));
  REQUIRE(store->flush().ok());
  postgres().stop();
  for (std::uint64_t step = 2; step <= 101; ++step) store->add(record("fp8", "l", step, 0.0));
  CHECK(!store->flush().ok());  // one more attempt, failed: the error says how many wait
  const HistoryStore::WriteHealth failing = store->write_health();
  CHECK(!failing.error.empty());
  CHECK(failing.pending == 100);
  CHECK(failing.lost == 0);
  postgres().start();
  Status flushed;
  for (int attempt = 0; attempt < 50; ++attempt) {  // the writer backs off up to 10 s between attempts
    flushed = store->flush();
    if (flushed.ok()) break;
  }
  INFO(flushed.message());
  REQUIRE(flushed.ok());
  CHECK(store->write_health().error.empty());
  CHECK(read_all(store->reader()).size() == 101);
}

TEST_CASE("daemons sharing one PostgreSQL keep their records apart by host and their tickets by writer", "[history]") {
  const std::string location = postgres().create_database();
  auto a = open_store(location, {"node-a:/data", 0});
  auto b = open_store(location, {"node-b:/data", 0});
  HistoryRecord from_b = record("fp8", "l", 1, 0.0);
  from_b.host = "node-b";
  from_b.rank = 8;
  a->add_sample({record("fp8", "l", 1, 0.0)}, SampleTicket{1, 1, 0});
  b->add_sample({from_b}, SampleTicket{1, 1, 0});
  REQUIRE(a->flush().ok());
  REQUIRE(b->flush().ok());
  const std::vector<HistoryRecord> rows = read_all(a->reader());
  REQUIRE(rows.size() == 2);
  // Each writer forgets only its own tickets: b's sample (1, 1) stays stored after a's restart.
  REQUIRE(a->forget_stored_samples().ok());
  CHECK(a->unstored({{1, 1, 0}}).value().size() == 1);
  CHECK(b->unstored({{1, 1, 0}}).value().empty());
}

TEST_CASE("a SQLite history from before schema versions is migrated: GEMM checks move to their own table", "[history]") {
  TempDir dir;
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(dir.file("history.sqlite").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, R"sql(
CREATE TABLE records (
  id INTEGER PRIMARY KEY, time REAL NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL, rank INTEGER NOT NULL,
  step INTEGER NOT NULL, layer TEXT NOT NULL, gemm TEXT NOT NULL, operand TEXT NOT NULL, dtype TEXT NOT NULL,
  numel INTEGER NOT NULL, recipe TEXT NOT NULL, format TEXT NOT NULL, scale REAL, scale_max REAL,
  scale_current REAL, histogram BLOB, stat_mse REAL, stat_cosine REAL);
CREATE TABLE scalars (time REAL NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL, rank INTEGER NOT NULL,
  step INTEGER NOT NULL, name TEXT NOT NULL, value REAL);
CREATE TABLE stored_samples (boot INTEGER NOT NULL, seq INTEGER NOT NULL);
INSERT INTO records VALUES (1, 1e9, 'job', 'old', 0, 5, 'l', 'fprop', 'x', 'bf16', 64, 'tensor_current', 'e4m3', 2, 0, 2, NULL, 0.5, 0.9);
INSERT INTO records VALUES (2, 1e9, 'job', 'old', 0, 5, 'l', 'fprop', 'y', 'f32', 64, 'gemm_fp32', 'e4m3', 2, 4, 0, NULL, 1e-3, 0.99);
INSERT INTO scalars VALUES (1e9, 'job', 'old', 0, 5, 'loss', 2.5);
)sql",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  {
    // Read-only, unmigrated: the GEMM check row is not a tensor record.
    auto reader = open_history_reader(dir.path());
    REQUIRE(reader.ok());
    CHECK(read_all(*reader.value()).size() == 1);
  }
  auto store = open_store(dir.path());
  CHECK(store->stored() == 1);
  const std::vector<HistoryRecord> rows = read_all(store->reader());
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].host.empty());
  CHECK(rows[0].statistics[stat_index("mse")] == 0.5);
  std::vector<GemmOutputRecord> outputs;
  REQUIRE(store->reader().query_gemm_outputs("old", [&](const GemmOutputRecord& g) {
    outputs.push_back(g);
    return true;
  }).ok());
  REQUIRE(outputs.size() == 1);
  CHECK(outputs[0].accumulate == "fp32");
  CHECK(outputs[0].scale_w == 4);
  CHECK(outputs[0].cosine == 0.99);
  int losses = 0;
  REQUIRE(store->reader().query_scalars("old", "loss", [&](const ScalarRecord&) { return ++losses > 0; }).ok());
  CHECK(losses == 1);
}

TEST_CASE("a sample's records and its ticket commit together, however many records it has", "[history]") {
  // A writer killed between two batches must never leave all of a sample's records without its
  // ticket: the next start would count a stored sample as lost. 4096 records fill one batch
  // exactly, so a batch cut there would put the ticket alone into the next one.
  TempDir dir;
  const std::string location = fresh_history("sqlite", dir);
  const std::string file = location + "/history.sqlite";
  constexpr int kRecords = 4096;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto store = open_store(location);
    std::vector<HistoryRecord> records;
    for (int i = 0; i < kRecords; ++i) records.push_back(record("crash", "blocks.0.mlp", static_cast<std::uint64_t>(i), 0.0));
    store->add_sample(std::move(records), SampleTicket{5, 1, 0});
    // As soon as a reader sees the records, the process dies: nothing after their commit runs.
    sqlite3* db = nullptr;
    for (int tries = 0; tries < 100000; ++tries) {
      if (db == nullptr && sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
        sqlite3_close(db);
        db = nullptr;
      }
      sqlite3_stmt* q = nullptr;
      if (db != nullptr && sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM records", -1, &q, nullptr) == SQLITE_OK &&
          sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int64(q, 0) > 0) {
        _exit(0);
      }
      sqlite3_finalize(q);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    _exit(1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  auto store = open_store(location);
  CHECK(read_all(store->reader()).size() == static_cast<std::size_t>(kRecords));
  auto lost = store->unstored({SampleTicket{5, 1, 0}});
  REQUIRE(lost.ok());
  CHECK(lost.value().empty());
}
