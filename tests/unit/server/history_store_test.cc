// The SQLite history: what was added is there after flush, filters work, and it survives reopening.
#include "history_store.h"

#include <sqlite3.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <cmath>

#include "../../support/temp_dir.h"
#include "fp8scope/statistics_table.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {
HistoryRecord record(const std::string& run, const std::string& layer, std::uint64_t step, double underflow) {
  HistoryRecord r;
  r.time = 1.0e9 + static_cast<double>(step);
  r.job = "job";
  r.run = run;
  r.step = step;
  r.layer = layer;
  r.gemm = "fprop";
  r.operand = "x";
  r.dtype = "bf16";
  r.numel = 4096;
  r.recipe = "tensor_current";
  r.format = "e4m3";
  r.scale = 2.0;
  for (const Statistic& s : statistics()) {
    r.statistics.push_back(std::string(s.key) == "underflow_ratio" ? underflow : std::nan(""));
  }
  r.histogram.assign(64, 1);
  return r;
}
}  // namespace

TEST_CASE("records and scalars are stored, filtered and kept across reopening", "[history_store]") {
  fp8scope::testing::TempDir dir;
  {
    auto store = HistoryStore::open(dir.path());
    REQUIRE(store.ok());
    for (std::uint64_t step = 0; step < 50; ++step) {
      store.value()->add(record("fp8", step % 2 ? "blocks.1.attn" : "blocks.0.mlp", step, step / 100.0));
      store.value()->add(ScalarRecord{0, "job", "fp8", 0, step, "loss", 3.0 - step * 0.01});
    }
    REQUIRE(store.value()->flush().ok());
    CHECK(store.value()->stored() == 50);
  }
  auto store = HistoryStore::open(dir.path());
  REQUIRE(store.ok());
  CHECK(store.value()->stored() == 50);
  HistoryFilter f;
  f.layer_regex = "attn$";
  f.min_step = 10;
  f.max_step = 19;
  std::vector<HistoryRecord> rows;
  REQUIRE(store.value()->query(f, [&](const HistoryRecord& r) {
    rows.push_back(r);
    return true;
  }).ok());
  REQUIRE(rows.size() == 5);
  CHECK(rows[0].step == 11);
  CHECK(rows[0].layer == "blocks.1.attn");
  CHECK(rows[0].histogram.size() == 64);
  const auto idx = static_cast<std::size_t>(find_statistic("underflow_ratio") - statistics().data());
  CHECK(rows[0].statistics[idx] == 0.11);
  CHECK(std::isnan(rows[0].statistics[0]));
  int losses = 0;
  REQUIRE(store.value()->query_scalars("fp8", "loss", [&](const ScalarRecord&) { return ++losses < 1000; }).ok());
  CHECK(losses == 50);
  f = HistoryFilter();
  f.layer_regex = "([bad";
  CHECK(!store.value()->query(f, [](const HistoryRecord&) { return true; }).ok());
}

TEST_CASE("an unwritable data dir is an error naming it", "[history_store]") {
  auto store = HistoryStore::open("/proc/fp8scope-cannot-be-here");
  REQUIRE(!store.ok());
  CHECK(store.message().find("/proc/fp8scope-cannot-be-here") != std::string::npos);
}

TEST_CASE("code fingerprints are stored, and a store without their column still reads and gains it", "[history_store]") {
  fp8scope::testing::TempDir dir;
  {
    auto store = HistoryStore::open(dir.path());
    REQUIRE(store.ok());
    HistoryRecord r = record("serve", "blocks.0.mlp", 3, 0.0);
    r.codes_digest = "0123456789abcdef";
    store.value()->add(r);
    store.value()->add(record("serve", "blocks.1.mlp", 3, 0.0));
    REQUIRE(store.value()->flush().ok());
  }
  auto digests = [&](const HistoryStore& s) {
    std::vector<std::string> out;
    REQUIRE(s.query(HistoryFilter(), [&](const HistoryRecord& r) {
      out.push_back(r.codes_digest);
      return true;
    }).ok());
    return out;
  };
  {
    auto reader = HistoryStore::open_read_only(dir.path());
    REQUIRE(reader.ok());
    CHECK(digests(*reader.value()) == std::vector<std::string>{"0123456789abcdef", ""});
    HistoryFilter serve;
    serve.run = "serve";
    CHECK(reader.value()->count(serve).value() == 2);
    serve.layer_regex = "1";
    CHECK(reader.value()->count(serve).value() == 1);
  }
  // A daemon from before the inference check wrote no such column.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dir.path() + "/history.sqlite").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "ALTER TABLE records DROP COLUMN codes_digest", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  {
    auto reader = HistoryStore::open_read_only(dir.path());
    REQUIRE(reader.ok());
    CHECK(digests(*reader.value()) == std::vector<std::string>{"", ""});
  }
  auto store = HistoryStore::open(dir.path());
  REQUIRE(store.ok());
  HistoryRecord r = record("serve", "blocks.2.mlp", 4, 0.0);
  r.codes_digest = "fedcba9876543210";
  store.value()->add(r);
  REQUIRE(store.value()->flush().ok());
  CHECK(digests(*store.value()).back() == "fedcba9876543210");
  CHECK(!HistoryStore::open_read_only(dir.file("nowhere")).ok());
}

TEST_CASE("a sample's ticket is committed with its records, and a restart tells stored samples from lost ones",
          "[history_store]") {
  fp8scope::testing::TempDir dir;
  std::vector<AckJournal::Leftover> accepted;
  {
    auto store = HistoryStore::open(dir.path());
    REQUIRE(store.ok());
    std::vector<std::uint64_t> stored;
    store.value()->on_stored_sample([&](const JournalTicket& t, bool ok) {
      CHECK(ok);
      stored.push_back(t.seq);
    });
    for (std::uint64_t seq = 1; seq <= 3; ++seq) {
      store.value()->add(record("fp8", "blocks.0.mlp", seq, 0.0));
      store.value()->add(JournalTicket{77, seq, static_cast<std::uint32_t>(seq)});
      accepted.push_back({77, seq, 0, "job"});
    }
    REQUIRE(store.value()->flush().ok());
    CHECK(stored == std::vector<std::uint64_t>{1, 2, 3});
  }
  accepted.push_back({77, 4, 0, "job"});  // acknowledged, never reached the history
  accepted.push_back({78, 1, 0, "job"});  // another start's sample 1
  auto store = HistoryStore::open(dir.path());
  REQUIRE(store.ok());
  auto lost = store.value()->unstored(accepted);
  REQUIRE(lost.ok());
  REQUIRE(lost.value().size() == 2);
  CHECK((lost.value()[0].boot == 77 && lost.value()[0].seq == 4));
  CHECK((lost.value()[1].boot == 78 && lost.value()[1].seq == 1));
  REQUIRE(store.value()->forget_stored_samples().ok());
  CHECK(store.value()->unstored(accepted).value().size() == accepted.size());
}

TEST_CASE("the stored count never trails the records a reader can already see", "[history_store]") {
  // `fp8scope status` once said "history 0 records" while `fp8scope history` listed rows: the count
  // followed the COMMIT, so a read between the two saw more than stored() said.
  fp8scope::testing::TempDir dir;
  auto store = HistoryStore::open(dir.path()).value();
  std::atomic<bool> done{false}, flushed{true};
  std::thread writer([&] {
    for (std::uint64_t step = 1; step <= 300; ++step) {
      store->add(record("race", "l", step, 0.0));
      if (!store->flush().ok()) flushed = false;  // one record per COMMIT: as many windows as possible
    }
    done = true;
  });
  std::uint64_t checks = 0, behind = 0;
  while (!done) {
    const std::uint64_t visible = store->count(HistoryFilter{}).value();
    if (store->stored() < visible) ++behind;
    ++checks;
  }
  writer.join();
  REQUIRE(flushed);
  INFO(checks << " checks");
  CHECK(behind == 0);
  CHECK(store->stored() == 300);
}
