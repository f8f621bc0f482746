#include "history_store.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <unordered_map>

#include "fp8scope/layer_pattern.h"
#include "fp8scope/statistics_table.h"
#include "fp8scope/stats.h"

namespace fp8scope::server {
namespace {

const char* kCreate = R"sql(
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
CREATE TABLE IF NOT EXISTS records (
  id INTEGER PRIMARY KEY, time REAL NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL, rank INTEGER NOT NULL,
  step INTEGER NOT NULL, layer TEXT NOT NULL, gemm TEXT NOT NULL, operand TEXT NOT NULL, dtype TEXT NOT NULL,
  numel INTEGER NOT NULL, recipe TEXT NOT NULL, format TEXT NOT NULL, scale REAL, scale_max REAL,
  scale_current REAL, histogram BLOB);
CREATE INDEX IF NOT EXISTS records_by_run ON records(run, step);
CREATE INDEX IF NOT EXISTS records_by_layer ON records(layer, gemm, operand);
CREATE TABLE IF NOT EXISTS scalars (
  time REAL NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL,
  name TEXT NOT NULL, value REAL);
CREATE INDEX IF NOT EXISTS scalars_by_run ON scalars(run, name, step);
CREATE TABLE IF NOT EXISTS stored_samples (boot INTEGER NOT NULL, seq INTEGER NOT NULL);
)sql";

Status sql_error(sqlite3* db, const std::string& what) {
  return Status::error(what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

Status exec(sqlite3* db, const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string m = message ? message : "unknown error";
    sqlite3_free(message);
    return Status::error("sqlite: " + m);
  }
  return Status();
}

// REGEXP for layer filters: linear-time layer patterns, the compiled ones of a connection cached
// (a few at a time: filters come from queries, not from rows).
using PatternCache = std::unordered_map<std::string, LayerPattern>;

void regexp(sqlite3_context* ctx, int, sqlite3_value** argv) {
  auto* cache = static_cast<PatternCache*>(sqlite3_user_data(ctx));
  const auto* pattern = reinterpret_cast<const char*>(sqlite3_value_text(argv[0]));
  const auto* text = reinterpret_cast<const char*>(sqlite3_value_text(argv[1]));
  if (pattern == nullptr || text == nullptr) return sqlite3_result_int(ctx, 0);
  auto it = cache->find(pattern);
  if (it == cache->end()) {
    std::string error;
    std::optional<LayerPattern> compiled = LayerPattern::compile(pattern, &error);
    if (!compiled) return sqlite3_result_error(ctx, ("layer pattern: " + error).c_str(), -1);
    if (cache->size() >= 16) cache->clear();
    it = cache->emplace(pattern, std::move(*compiled)).first;
  }
  sqlite3_result_int(ctx, it->second.search(text) ? 1 : 0);
}

Result<sqlite3*> open_db(const std::string& path, bool read_only = false) {
  sqlite3* db = nullptr;
  const int mode = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path.c_str(), &db, mode | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    Status s = sql_error(db, "cannot open " + path);
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 5000);
  sqlite3_create_function_v2(db, "regexp", 2, SQLITE_UTF8, new PatternCache, regexp, nullptr, nullptr,
                             [](void* p) { delete static_cast<PatternCache*>(p); });
  return db;
}

std::string stat_column(const Statistic& s) { return std::string("stat_") + s.key; }

// Columns newer daemons added to the first schema: a store from an older daemon gains them when
// opened for writing, and reads as NULL where it lacks them when opened read-only.
struct AddedColumn {
  const char* name;
  const char* type;
};
constexpr AddedColumn kAddedColumns[] = {
    {"codes_digest", "TEXT"}, {"scale_layout", "TEXT"}, {"gemm_alpha", "REAL"}, {"scale_histogram", "BLOB"}};

bool has_column(sqlite3* db, const std::string& column) {
  sqlite3_stmt* probe = nullptr;
  const std::string sql = "SELECT 1 FROM pragma_table_info('records') WHERE name = '" + column + "'";
  sqlite3_prepare_v2(db, sql.c_str(), -1, &probe, nullptr);
  const bool present = sqlite3_step(probe) == SQLITE_ROW;
  sqlite3_finalize(probe);
  return present;
}

}  // namespace

Result<std::unique_ptr<HistoryStore>> HistoryStore::open(const std::string& data_dir) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) return Status::error("--data-dir " + data_dir + ": cannot create: " + ec.message());
  const std::string path = data_dir + "/history.sqlite";
  Result<sqlite3*> w = open_db(path);
  if (!w.ok()) return w.status();
  sqlite3* db = w.value();
  if (Status s = exec(db, kCreate); !s.ok()) {
    sqlite3_close(db);
    return Status::error(path + ": " + s.message());
  }
  // One column per statistic; a store from an older daemon gains the new ones.
  for (const Statistic& s : statistics()) {
    const std::string column = stat_column(s);
    if (!has_column(db, column)) {
      if (Status st = exec(db, "ALTER TABLE records ADD COLUMN " + column + " REAL"); !st.ok()) {
        sqlite3_close(db);
        return Status::error(path + ": " + st.message());
      }
    }
  }
  for (const AddedColumn& c : kAddedColumns) {
    if (has_column(db, c.name)) continue;
    if (Status st = exec(db, std::string("ALTER TABLE records ADD COLUMN ") + c.name + " " + c.type); !st.ok()) {
      sqlite3_close(db);
      return Status::error(path + ": " + st.message());
    }
  }
  Result<sqlite3*> r = open_db(path);
  if (!r.ok()) {
    sqlite3_close(db);
    return r.status();
  }
  return std::unique_ptr<HistoryStore>(new HistoryStore(path, db, r.value()));
}

Result<std::unique_ptr<HistoryStore>> HistoryStore::open_read_only(const std::string& data_dir) {
  const std::string path = data_dir + "/history.sqlite";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::error("--data-dir " + data_dir + ": no history.sqlite there (expected fp8scoped's --data-dir)");
  }
  Result<sqlite3*> r = open_db(path, true);
  if (!r.ok()) return r.status();
  return std::unique_ptr<HistoryStore>(new HistoryStore(path, nullptr, r.value()));
}

HistoryStore::HistoryStore(std::string path, sqlite3* write_db, sqlite3* read_db)
    : path_(std::move(path)), write_db_(write_db), read_db_(read_db) {
  for (const AddedColumn& c : kAddedColumns) has_added_.push_back(has_column(read_db, c.name));
  sqlite3_stmt* count = nullptr;
  sqlite3_prepare_v2(read_db_, "SELECT COUNT(*) FROM records", -1, &count, nullptr);
  if (sqlite3_step(count) == SQLITE_ROW) records_ = static_cast<std::uint64_t>(sqlite3_column_int64(count, 0));
  sqlite3_finalize(count);
  if (write_db_ != nullptr) writer_ = std::thread([this] { writer_loop(); });
}

HistoryStore::~HistoryStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
  sqlite3_close(read_db_);
  if (write_db_ != nullptr) sqlite3_close(write_db_);
}

void HistoryStore::add(HistoryRecord record) { enqueue(std::move(record)); }
void HistoryStore::add(ScalarRecord record) { enqueue(std::move(record)); }
void HistoryStore::add(JournalTicket stored_sample) { enqueue(stored_sample); }

void HistoryStore::on_stored_sample(std::function<void(const JournalTicket&, bool)> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  sample_listener_ = std::move(listener);
}

void HistoryStore::enqueue(Item item) {
  if (write_db_ == nullptr) return;
  std::optional<JournalTicket> dropped_sample;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(item));
    ++enqueued_;
    if (pending_.size() > kMaxPendingRecords) {  // writes have failed for long: the oldest go
      if (const auto* t = std::get_if<JournalTicket>(&pending_.front())) {
        dropped_sample = *t;
      } else {
        ++lost_;
      }
      pending_.pop_front();
      ++written_;
      committed_.notify_all();
    }
  }
  if (dropped_sample && sample_listener_) sample_listener_(*dropped_sample, false);
  wake_.notify_one();
}

Result<std::vector<AckJournal::Leftover>> HistoryStore::unstored(
    const std::vector<AckJournal::Leftover>& accepted) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  sqlite3_stmt* q = nullptr;
  if (sqlite3_prepare_v2(read_db_, "SELECT 1 FROM stored_samples WHERE boot = ? AND seq = ?", -1, &q, nullptr) !=
      SQLITE_OK) {
    return sql_error(read_db_, "read stored_samples");
  }
  std::vector<AckJournal::Leftover> lost;
  for (const AckJournal::Leftover& a : accepted) {
    sqlite3_bind_int64(q, 1, static_cast<sqlite3_int64>(a.boot));
    sqlite3_bind_int64(q, 2, static_cast<sqlite3_int64>(a.seq));
    const int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      sqlite3_finalize(q);
      return sql_error(read_db_, "read stored_samples");
    }
    if (rc == SQLITE_DONE) lost.push_back(a);
    sqlite3_reset(q);
  }
  sqlite3_finalize(q);
  return lost;
}

Status HistoryStore::forget_stored_samples() {
  if (write_db_ == nullptr) return Status();
  return exec(write_db_, "DELETE FROM stored_samples");
}

Status HistoryStore::flush() {
  if (write_db_ == nullptr) return Status();
  std::unique_lock<std::mutex> lock(mu_);
  const std::uint64_t target = enqueued_;
  const std::uint64_t failures = failed_writes_;
  flush_requested_ = true;
  wake_.notify_one();
  // Everything written, or one more failed attempt: a failing disk must not hold a shutdown.
  committed_.wait(lock, [&] { return written_ >= target || failed_writes_ > failures; });
  if (written_ >= target) return Status();
  return Status::error(std::to_string(pending_.size()) + " records are not written: " + last_error_);
}

HistoryStore::WriteHealth HistoryStore::write_health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {last_error_, failed_writes_, lost_, pending_.size() + writing_};
}

std::uint64_t HistoryStore::stored() const {
  std::lock_guard<std::mutex> committing(commit_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

void HistoryStore::writer_loop() {
  auto backoff = std::chrono::milliseconds(0);
  for (;;) {
    std::vector<Item> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (backoff.count() > 0) {
        wake_.wait_for(lock, backoff, [&] { return stopping_ || flush_requested_; });
      } else {
        wake_.wait_for(lock, std::chrono::milliseconds(200),
                       [&] { return stopping_ || flush_requested_ || pending_.size() >= 512; });
      }
      flush_requested_ = false;
      if (pending_.empty() && stopping_) return;
      while (!pending_.empty() && batch.size() < 4096) {
        batch.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
      writing_ = batch.size();
    }
    if (batch.empty()) continue;
    const Status s = write_batch(batch);
    if (s.ok() && sample_listener_) {
      for (const Item& item : batch) {
        if (const auto* t = std::get_if<JournalTicket>(&item)) sample_listener_(*t, true);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = 0;
    if (s.ok()) {
      written_ += batch.size();
      if (!last_error_.empty()) {
        spdlog::warn("history: writes to {} resumed; {} attempts had failed, the last with: {}", path_,
                     failed_writes_, last_error_);
      }
      last_error_.clear();
      backoff = std::chrono::milliseconds(0);
    } else {
      // Kept, in order, for the next attempt: 0.1 s, doubling to 10 s. Told once per failure streak.
      if (last_error_.empty()) {
        spdlog::error("history: cannot write {}: {}; {} records kept in memory and retried", path_, s.message(),
                      batch.size() + pending_.size());
      }
      last_error_ = s.message();
      ++failed_writes_;
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) pending_.push_front(std::move(*it));
      backoff = std::min<std::chrono::milliseconds>(std::max<std::chrono::milliseconds>(backoff * 2, std::chrono::milliseconds(100)),
                                                    std::chrono::seconds(10));
      if (stopping_) {  // the last attempt at shutdown: what is left is lost, and said so
        lost_ += pending_.size();
        written_ += pending_.size();
        pending_.clear();
      }
    }
    committed_.notify_all();
  }
}

Status HistoryStore::write_batch(std::vector<Item>& batch) {
  std::string insert = "INSERT INTO records (time, job, run, rank, step, layer, gemm, operand, dtype, numel, recipe, "
                       "format, scale, scale_max, scale_current, histogram";
  std::string values = ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?";
  for (const Statistic& s : statistics()) {
    insert += ", " + stat_column(s);
    values += ",?";
  }
  for (const AddedColumn& c : kAddedColumns) {
    insert += std::string(", ") + c.name;
    values += ",?";
  }
  insert += values + ")";
  sqlite3_stmt* rec = nullptr;
  sqlite3_stmt* sc = nullptr;
  sqlite3_stmt* mark = nullptr;
  if (sqlite3_prepare_v2(write_db_, insert.c_str(), -1, &rec, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(write_db_, "INSERT INTO scalars VALUES (?,?,?,?,?,?,?)", -1, &sc, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(write_db_, "INSERT INTO stored_samples VALUES (?,?)", -1, &mark, nullptr) != SQLITE_OK) {
    sqlite3_finalize(rec);
    sqlite3_finalize(sc);
    return sql_error(write_db_, "prepare insert");
  }
  Status status = exec(write_db_, "BEGIN");
  // The previous batch's samples are released from the journal by now: their ids are not needed.
  if (status.ok() && stored_samples_done_ > 0) {
    status = exec(write_db_, "DELETE FROM stored_samples WHERE rowid <= " + std::to_string(stored_samples_done_));
  }
  std::uint64_t records = 0;
  std::int64_t last_mark = 0;
  for (auto& item : batch) {
    if (!status.ok()) break;
    if (const auto* t = std::get_if<JournalTicket>(&item)) {
      sqlite3_bind_int64(mark, 1, static_cast<sqlite3_int64>(t->boot));
      sqlite3_bind_int64(mark, 2, static_cast<sqlite3_int64>(t->seq));
      if (sqlite3_step(mark) != SQLITE_DONE) status = sql_error(write_db_, "insert stored sample");
      last_mark = sqlite3_last_insert_rowid(write_db_);
      sqlite3_reset(mark);
    } else if (auto* r = std::get_if<HistoryRecord>(&item)) {
      int i = 1;
      sqlite3_bind_double(rec, i++, r->time);
      for (const std::string* t : {&r->job, &r->run}) sqlite3_bind_text(rec, i++, t->c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(rec, i++, r->rank);
      sqlite3_bind_int64(rec, i++, static_cast<sqlite3_int64>(r->step));
      for (const std::string* t : {&r->layer, &r->gemm, &r->operand, &r->dtype}) {
        sqlite3_bind_text(rec, i++, t->c_str(), -1, SQLITE_TRANSIENT);
      }
      sqlite3_bind_int64(rec, i++, r->numel);
      for (const std::string* t : {&r->recipe, &r->format}) sqlite3_bind_text(rec, i++, t->c_str(), -1, SQLITE_TRANSIENT);
      for (double v : {r->scale, r->scale_max, r->scale_current}) sqlite3_bind_double(rec, i++, v);
      sqlite3_bind_blob(rec, i++, r->histogram.data(), static_cast<int>(r->histogram.size() * sizeof(std::uint64_t)),
                        SQLITE_TRANSIENT);
      for (std::size_t k = 0; k < statistics().size(); ++k) {
        const double v = k < r->statistics.size() ? r->statistics[k] : std::nan("");
        std::isnan(v) ? sqlite3_bind_null(rec, i++) : sqlite3_bind_double(rec, i++, v);
      }
      for (const std::string* t : {&r->codes_digest, &r->scale_layout}) {
        t->empty() ? sqlite3_bind_null(rec, i++) : sqlite3_bind_text(rec, i++, t->c_str(), -1, SQLITE_TRANSIENT);
      }
      r->gemm_alpha == 0 ? sqlite3_bind_null(rec, i++) : sqlite3_bind_double(rec, i++, r->gemm_alpha);
      r->scale_histogram.empty()
          ? sqlite3_bind_null(rec, i++)
          : sqlite3_bind_blob(rec, i++, r->scale_histogram.data(),
                              static_cast<int>(r->scale_histogram.size() * sizeof(std::uint64_t)), SQLITE_TRANSIENT);
      if (sqlite3_step(rec) != SQLITE_DONE) status = sql_error(write_db_, "insert record");
      sqlite3_reset(rec);
      ++records;
    } else {
      const auto& s = std::get<ScalarRecord>(item);
      sqlite3_bind_double(sc, 1, s.time);
      sqlite3_bind_text(sc, 2, s.job.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(sc, 3, s.run.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(sc, 4, s.rank);
      sqlite3_bind_int64(sc, 5, static_cast<sqlite3_int64>(s.step));
      sqlite3_bind_text(sc, 6, s.name.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_double(sc, 7, s.value);
      if (sqlite3_step(sc) != SQLITE_DONE) status = sql_error(write_db_, "insert scalar");
      sqlite3_reset(sc);
    }
  }
  std::unique_lock<std::mutex> committing(commit_mu_);
  if (status.ok()) status = exec(write_db_, "COMMIT");
  if (!status.ok()) {
    (void)exec(write_db_, "ROLLBACK");
    records = 0;
  } else {
    stored_samples_done_ = last_mark;  // what this batch deleted is gone; what it added goes next time
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    records_ += records;
  }
  committing.unlock();
  sqlite3_finalize(rec);
  sqlite3_finalize(sc);
  sqlite3_finalize(mark);
  return status;
}

namespace {

const char* kFilterWhere =
    " FROM records WHERE step >= ?1 AND (?2 = 0 OR step <= ?2) AND (?3 = '' OR job = ?3) AND (?4 = '' OR run = ?4)"
    " AND (?5 = '' OR layer REGEXP ?5) AND (?6 = '' OR gemm = ?6) AND (?7 = '' OR operand = ?7)"
    " AND (?8 = '' OR recipe = ?8)";

// Steps are stored as SQLite's signed INTEGER; bounds past its largest value select up to it (the
// daemon refuses larger steps) rather than wrapping negative.
sqlite3_int64 step_bound(std::uint64_t step) {
  return static_cast<sqlite3_int64>(std::min<std::uint64_t>(step, std::numeric_limits<sqlite3_int64>::max()));
}

void bind_filter(sqlite3_stmt* q, const HistoryFilter& f) {
  sqlite3_bind_int64(q, 1, step_bound(f.min_step));
  sqlite3_bind_int64(q, 2, step_bound(f.max_step));
  int i = 3;
  for (const std::string* t : {&f.job, &f.run, &f.layer_regex, &f.gemm, &f.operand, &f.recipe}) {
    sqlite3_bind_text(q, i++, t->c_str(), -1, SQLITE_TRANSIENT);
  }
}

}  // namespace

Result<std::uint64_t> HistoryStore::count(const HistoryFilter& f) const {
  const std::string sql = std::string("SELECT COUNT(*)") + kFilterWhere;
  std::lock_guard<std::mutex> lock(read_mu_);
  sqlite3_stmt* q = nullptr;
  if (sqlite3_prepare_v2(read_db_, sql.c_str(), -1, &q, nullptr) != SQLITE_OK) return sql_error(read_db_, "count");
  bind_filter(q, f);
  const int rc = sqlite3_step(q);
  const auto n = static_cast<std::uint64_t>(sqlite3_column_int64(q, 0));
  sqlite3_finalize(q);
  if (rc != SQLITE_ROW) return sql_error(read_db_, "count");
  return n;
}

Status HistoryStore::query(const HistoryFilter& f, const std::function<bool(const HistoryRecord&)>& each) const {
  std::string sql = "SELECT time, job, run, rank, step, layer, gemm, operand, dtype, numel, recipe, format, scale, "
                    "scale_max, scale_current, histogram";
  for (const Statistic& s : statistics()) sql += ", " + stat_column(s);
  for (std::size_t c = 0; c < std::size(kAddedColumns); ++c) {
    sql += has_added_[c] ? std::string(", ") + kAddedColumns[c].name : std::string(", NULL");
  }
  sql += std::string(kFilterWhere) + " ORDER BY id LIMIT ?9";
  std::lock_guard<std::mutex> lock(read_mu_);
  sqlite3_stmt* q = nullptr;
  if (sqlite3_prepare_v2(read_db_, sql.c_str(), -1, &q, nullptr) != SQLITE_OK) return sql_error(read_db_, "query");
  bind_filter(q, f);
  sqlite3_bind_int64(q, 9, f.limit == 0 ? 100000 : f.limit);
  auto text = [&](int col) {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(q, col));
    return std::string(t ? t : "");
  };
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    HistoryRecord r;
    r.time = sqlite3_column_double(q, 0);
    r.job = text(1);
    r.run = text(2);
    r.rank = static_cast<std::uint32_t>(sqlite3_column_int64(q, 3));
    r.step = static_cast<std::uint64_t>(sqlite3_column_int64(q, 4));
    r.layer = text(5);
    r.gemm = text(6);
    r.operand = text(7);
    r.dtype = text(8);
    r.numel = sqlite3_column_int64(q, 9);
    r.recipe = text(10);
    r.format = text(11);
    r.scale = sqlite3_column_double(q, 12);
    r.scale_max = sqlite3_column_double(q, 13);
    r.scale_current = sqlite3_column_double(q, 14);
    const auto* blob = static_cast<const std::uint64_t*>(sqlite3_column_blob(q, 15));
    r.histogram.assign(blob, blob + sqlite3_column_bytes(q, 15) / static_cast<int>(sizeof(std::uint64_t)));
    for (std::size_t k = 0; k < statistics().size(); ++k) {
      const int col = 16 + static_cast<int>(k);
      r.statistics.push_back(sqlite3_column_type(q, col) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(q, col));
    }
    const int added = 16 + static_cast<int>(statistics().size());
    r.codes_digest = text(added);
    r.scale_layout = text(added + 1);
    r.gemm_alpha = sqlite3_column_double(q, added + 2);
    const auto* scales = static_cast<const std::uint64_t*>(sqlite3_column_blob(q, added + 3));
    r.scale_histogram.assign(scales, scales + sqlite3_column_bytes(q, added + 3) / static_cast<int>(sizeof(std::uint64_t)));
    if (!each(r)) break;
  }
  Status s = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? Status() : sql_error(read_db_, "query");
  sqlite3_finalize(q);
  return s;
}

Status HistoryStore::query_scalars(const std::string& run, const std::string& name,
                                   const std::function<bool(const ScalarRecord&)>& each) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  sqlite3_stmt* q = nullptr;
  if (sqlite3_prepare_v2(read_db_,
                         "SELECT time, job, run, rank, step, name, value FROM scalars WHERE (?1 = '' OR run = ?1) "
                         "AND (?2 = '' OR name = ?2) ORDER BY step, rank",
                         -1, &q, nullptr) != SQLITE_OK) {
    return sql_error(read_db_, "query scalars");
  }
  sqlite3_bind_text(q, 1, run.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q, 2, name.c_str(), -1, SQLITE_TRANSIENT);
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    ScalarRecord s;
    s.time = sqlite3_column_double(q, 0);
    s.job = reinterpret_cast<const char*>(sqlite3_column_text(q, 1));
    s.run = reinterpret_cast<const char*>(sqlite3_column_text(q, 2));
    s.rank = static_cast<std::uint32_t>(sqlite3_column_int64(q, 3));
    s.step = static_cast<std::uint64_t>(sqlite3_column_int64(q, 4));
    s.name = reinterpret_cast<const char*>(sqlite3_column_text(q, 5));
    s.value = sqlite3_column_double(q, 6);
    if (!each(s)) break;
  }
  Status st = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? Status() : sql_error(read_db_, "query scalars");
  sqlite3_finalize(q);
  return st;
}

}  // namespace fp8scope::server
