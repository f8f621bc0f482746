#include "sqlite_backend.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"
#include "schema_migrations.h"

namespace fp8scope::history {
namespace {

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

// One prepared statement, finalized however the function returns.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) { ok_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) == SQLITE_OK; }
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return ok_; }
  sqlite3_stmt* get() const { return s_; }
  void text(int i, const std::string& t) { sqlite3_bind_text(s_, i, t.c_str(), -1, SQLITE_TRANSIENT); }
  void text_or_null(int i, const std::string& t) { t.empty() ? (void)sqlite3_bind_null(s_, i) : text(i, t); }
  void real(int i, double v) { sqlite3_bind_double(s_, i, v); }
  void real_or_null(int i, double v) { std::isnan(v) ? (void)sqlite3_bind_null(s_, i) : real(i, v); }
  void integer(int i, std::int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void counts(int i, const std::vector<std::uint64_t>& v) {
    v.empty() ? (void)sqlite3_bind_null(s_, i)
              : (void)sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size() * sizeof(std::uint64_t)), SQLITE_TRANSIENT);
  }
  std::string column_text(int col) const {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return t ? t : "";
  }
  std::vector<std::uint64_t> column_counts(int col) const {
    const auto* blob = static_cast<const std::uint64_t*>(sqlite3_column_blob(s_, col));
    return std::vector<std::uint64_t>(blob, blob + sqlite3_column_bytes(s_, col) / static_cast<int>(sizeof(std::uint64_t)));
  }
  double column_real_or_nan(int col) const {
    return sqlite3_column_type(s_, col) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s_, col);
  }

 private:
  sqlite3_stmt* s_ = nullptr;
  bool ok_ = false;
};

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

Result<sqlite3*> open_db(const std::string& path, bool read_only) {
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

// Rows are written with their key first: time, job, run, host, rank, step (parameters 1 to 6).
template <typename Row>
void bind_key(Statement& q, const Row& r) {
  q.real(1, r.time);
  q.text(2, r.job);
  q.text(3, r.run);
  q.text(4, r.host);
  q.integer(5, r.rank);
  q.integer(6, static_cast<std::int64_t>(r.step));
}

// Scalars and GEMM outputs are read with their key first (columns 0 to 5).
template <typename Row>
void read_key(const Statement& q, Row& r) {
  r.time = sqlite3_column_double(q.get(), 0);
  r.job = q.column_text(1);
  r.run = q.column_text(2);
  r.host = q.column_text(3);
  r.rank = static_cast<std::uint32_t>(sqlite3_column_int64(q.get(), 4));
  r.step = static_cast<std::uint64_t>(sqlite3_column_int64(q.get(), 5));
}

bool has_column(sqlite3* db, const char* table, const std::string& column) {
  Statement probe(db, std::string("SELECT 1 FROM pragma_table_info('") + table + "') WHERE name = '" + column + "'");
  return probe.ok() && sqlite3_step(probe.get()) == SQLITE_ROW;
}

bool has_table(sqlite3* db, const char* table) {
  Statement probe(db, std::string("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '") + table + "'");
  return probe.ok() && sqlite3_step(probe.get()) == SQLITE_ROW;
}

Status add_missing_column(sqlite3* db, const char* table, const std::string& column, const char* type) {
  if (has_column(db, table, column)) return Status();
  return exec(db, std::string("ALTER TABLE ") + table + " ADD COLUMN " + column + " " + type);
}

// Columns of `records` that came after the first schema: read as NULL from an older file opened
// read-only.
constexpr const char* kLateRecordColumns[] = {"codes_digest", "scale_layout", "gemm_alpha", "scale_histogram", "host"};

// Version 1 is the schema daemons wrote before versions were recorded; its statements also bring
// such a file (which may lack the later columns) up to it.
const Migration<sqlite3*> kMigrations[] = {
    {1, "records, scalars and stored samples",
     [](sqlite3*& db) -> Status {
       if (Status s = exec(db, R"sql(
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
)sql");
           !s.ok()) {
         return s;
       }
       const std::pair<const char*, const char*> late[] = {
           {"codes_digest", "TEXT"}, {"scale_layout", "TEXT"}, {"gemm_alpha", "REAL"}, {"scale_histogram", "BLOB"}};
       for (const auto& [column, type] : late) {
         if (Status s = add_missing_column(db, "records", column, type); !s.ok()) return s;
       }
       return Status();
     }},
    {2, "host in every key, GEMM checks in their own table, time index for retention",
     [](sqlite3*& db) -> Status {
       return exec(db, R"sql(
ALTER TABLE records ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE scalars ADD COLUMN host TEXT NOT NULL DEFAULT '';
CREATE TABLE gemm_outputs (
  id INTEGER PRIMARY KEY, time REAL NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL, host TEXT NOT NULL,
  rank INTEGER NOT NULL, step INTEGER NOT NULL, layer TEXT NOT NULL, accumulate TEXT NOT NULL,
  numel INTEGER NOT NULL, scale_x REAL, scale_w REAL, mse REAL, cosine REAL, max_rel_error REAL);
CREATE INDEX gemm_outputs_by_run ON gemm_outputs(run, step);
INSERT INTO gemm_outputs (time, job, run, host, rank, step, layer, accumulate, numel, scale_x, scale_w, mse, cosine)
  SELECT time, job, run, '', rank, step, layer, substr(recipe, 6), numel, scale, scale_max, stat_mse, stat_cosine
  FROM records WHERE operand = 'y' ORDER BY id;
DELETE FROM records WHERE operand = 'y';
CREATE INDEX records_by_time ON records(time);
CREATE INDEX scalars_by_time ON scalars(time);
)sql");
     }},
};
constexpr int kLatestVersion = 2;

int schema_version(sqlite3* db) {
  if (!has_table(db, "schema_version")) return 0;
  Statement q(db, "SELECT MAX(version) FROM schema_version");
  return q.ok() && sqlite3_step(q.get()) == SQLITE_ROW ? sqlite3_column_int(q.get(), 0) : 0;
}

// Each migration in its own transaction, with the version it reaches; the statistic columns follow
// the statistics table (a column per statistic, added when the table grows).
Status migrate(sqlite3* db, const std::string& path) {
  if (Status s = exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s.ok()) return s;
  const int at = schema_version(db);
  if (Status s = check_schema_version(at, kLatestVersion, path); !s.ok()) return s;
  for (const Migration<sqlite3*>& m : kMigrations) {
    if (m.version <= at) continue;
    Status s = exec(db, "BEGIN IMMEDIATE");
    sqlite3* handle = db;
    if (s.ok() && m.version == 2) {  // it reads stat_mse and stat_cosine to move the GEMM checks
      for (const Statistic& st : statistics()) {
        if (s.ok()) s = add_missing_column(db, "records", stat_column(st), "REAL");
      }
    }
    if (s.ok()) s = m.apply(handle);
    if (s.ok()) s = exec(db, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, time REAL NOT NULL)");
    if (s.ok()) s = exec(db, "INSERT INTO schema_version VALUES (" + std::to_string(m.version) + ", unixepoch())");
    if (s.ok()) s = exec(db, "COMMIT");
    if (!s.ok()) {
      (void)exec(db, "ROLLBACK");
      return Status::error(path + ": schema migration to version " + std::to_string(m.version) + " (" + m.change +
                           ") failed: " + s.message());
    }
  }
  for (const Statistic& st : statistics()) {
    if (Status s = add_missing_column(db, "records", stat_column(st), "REAL"); !s.ok()) return s;
  }
  return Status();
}

const char* kFilterWhere =
    " FROM records WHERE step >= ?1 AND (?2 = 0 OR step <= ?2) AND (?3 = '' OR job = ?3) AND (?4 = '' OR run = ?4)"
    " AND (?5 = '' OR layer REGEXP ?5) AND (?6 = '' OR gemm = ?6) AND (?7 = '' OR operand = ?7)"
    " AND (?8 = '' OR recipe = ?8) AND id > ?10";

// Steps are stored as SQLite's signed INTEGER; bounds past its largest value select up to it (the
// daemon refuses larger steps) rather than wrapping negative.
std::int64_t step_bound(std::uint64_t step) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(step, std::numeric_limits<std::int64_t>::max()));
}

void bind_filter(Statement& q, const HistoryFilter& f) {
  q.integer(1, step_bound(f.min_step));
  q.integer(2, step_bound(f.max_step));
  q.text(3, f.job);
  q.text(4, f.run);
  q.text(5, f.layer_regex);
  q.text(6, f.gemm ? gemm_name(*f.gemm) : "");
  q.text(7, f.operand ? operand_name(*f.operand) : "");
  q.text(8, f.recipe);
  q.integer(10, static_cast<std::int64_t>(std::min<std::uint64_t>(f.after_id, std::numeric_limits<std::int64_t>::max())));
}

class SqliteBackend final : public Backend {
 public:
  SqliteBackend(std::string path, sqlite3* write_db, sqlite3* read_db)
      : path_(std::move(path)), write_db_(write_db), read_db_(read_db) {
    for (const char* c : kLateRecordColumns) late_columns_.push_back(has_column(read_db_, "records", c));
    for (const Statistic& s : statistics()) stat_columns_.push_back(has_column(read_db_, "records", stat_column(s)));
    has_gemm_outputs_ = has_table(read_db_, "gemm_outputs");
    has_scalar_host_ = has_column(read_db_, "scalars", "host");
    Statement count(read_db_, "SELECT COUNT(*) FROM records");
    if (count.ok() && sqlite3_step(count.get()) == SQLITE_ROW) {
      records_at_open_ = static_cast<std::uint64_t>(sqlite3_column_int64(count.get(), 0));
    }
  }
  ~SqliteBackend() override {
    sqlite3_close(read_db_);
    if (write_db_ != nullptr) sqlite3_close(write_db_);
  }

  std::string location() const override { return path_; }
  std::uint64_t records_at_open() const override { return records_at_open_; }

  Status write(const WriteBatch& batch) override;
  Result<std::vector<SampleTicket>> unstored(const std::vector<SampleTicket>& accepted) const override;
  Status forget_stored_samples() override {
    std::lock_guard<std::mutex> lock(write_mu_);
    return exec(write_db_, "DELETE FROM stored_samples");
  }
  Result<std::uint64_t> delete_before(double time) override;

  Status query(const HistoryFilter& filter, const std::function<bool(const HistoryRecord&)>& each) const override;
  Result<std::uint64_t> count(const HistoryFilter& filter) const override;
  Status query_scalars(const std::string& run, const std::string& name,
                       const std::function<bool(const ScalarRecord&)>& each) const override;
  Status query_gemm_outputs(const std::string& run,
                            const std::function<bool(const GemmOutputRecord&)>& each) const override;

 private:
  Status insert_records(const std::vector<HistoryRecord>& records);
  Status insert_rest(const WriteBatch& batch, std::int64_t* last_mark);

  std::string path_;
  sqlite3* write_db_;
  sqlite3* read_db_;
  // A batch's transaction spans many calls: retention and the start-up's ticket cleanup wait for it.
  std::mutex write_mu_;
  mutable std::mutex read_mu_;
  std::vector<bool> late_columns_;  // which of kLateRecordColumns the file has
  std::vector<bool> stat_columns_;  // which statistics it has columns for
  bool has_gemm_outputs_ = false, has_scalar_host_ = false;
  std::uint64_t records_at_open_ = 0;
  // The last committed batch's stored_samples rows (up to this rowid; 0 = none): released by then,
  // deleted in the next batch.
  std::int64_t stored_samples_done_ = 0;
};

Status SqliteBackend::insert_records(const std::vector<HistoryRecord>& records) {
  std::string insert = "INSERT INTO records (time, job, run, host, rank, step, layer, gemm, operand, dtype, numel, "
                       "recipe, format, scale, scale_max, scale_current, histogram, codes_digest, scale_layout, "
                       "gemm_alpha, scale_histogram";
  std::string values = ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?";
  for (const Statistic& s : statistics()) {
    insert += ", " + stat_column(s);
    values += ",?";
  }
  Statement rec(write_db_, insert + values + ")");
  if (!rec.ok()) return sql_error(write_db_, "prepare insert record");
  for (const HistoryRecord& r : records) {
    bind_key(rec, r);
    int i = 7;
    rec.text(i++, r.layer);
    rec.text(i++, gemm_name(r.gemm));
    rec.text(i++, operand_name(r.operand));
    rec.text(i++, r.dtype);
    rec.integer(i++, r.numel);
    rec.text(i++, r.recipe);
    rec.text(i++, r.format);
    for (double v : {r.scale, r.scale_max, r.scale_current}) rec.real(i++, v);
    rec.counts(i++, r.histogram);
    rec.text_or_null(i++, r.codes_digest);
    rec.text_or_null(i++, r.scale_layout);
    r.gemm_alpha == 0 ? (void)sqlite3_bind_null(rec.get(), i++) : rec.real(i++, r.gemm_alpha);
    rec.counts(i++, r.scale_histogram);
    for (std::size_t k = 0; k < statistics().size(); ++k) {
      rec.real_or_null(i++, k < r.statistics.size() ? r.statistics[k] : std::nan(""));
    }
    if (sqlite3_step(rec.get()) != SQLITE_DONE) return sql_error(write_db_, "insert record");
    sqlite3_reset(rec.get());
  }
  return Status();
}

Status SqliteBackend::insert_rest(const WriteBatch& batch, std::int64_t* last_mark) {
  Statement sc(write_db_, "INSERT INTO scalars (time, job, run, host, rank, step, name, value) VALUES (?,?,?,?,?,?,?,?)");
  Statement out(write_db_,
                "INSERT INTO gemm_outputs (time, job, run, host, rank, step, layer, accumulate, numel, scale_x, "
                "scale_w, mse, cosine, max_rel_error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  Statement mark(write_db_, "INSERT INTO stored_samples VALUES (?,?)");
  if (!sc.ok() || !out.ok() || !mark.ok()) return sql_error(write_db_, "prepare insert");
  for (const ScalarRecord& s : batch.scalars) {
    bind_key(sc, s);
    sc.text(7, s.name);
    sc.real(8, s.value);
    if (sqlite3_step(sc.get()) != SQLITE_DONE) return sql_error(write_db_, "insert scalar");
    sqlite3_reset(sc.get());
  }
  for (const GemmOutputRecord& g : batch.gemm_outputs) {
    bind_key(out, g);
    out.text(7, g.layer);
    out.text(8, g.accumulate);
    out.integer(9, g.numel);
    int i = 10;
    for (double v : {g.scale_x, g.scale_w, g.mse, g.cosine, g.max_rel_error}) out.real_or_null(i++, v);
    if (sqlite3_step(out.get()) != SQLITE_DONE) return sql_error(write_db_, "insert GEMM output");
    sqlite3_reset(out.get());
  }
  for (const SampleTicket& t : batch.stored_samples) {
    mark.integer(1, static_cast<std::int64_t>(t.boot));
    mark.integer(2, static_cast<std::int64_t>(t.seq));
    if (sqlite3_step(mark.get()) != SQLITE_DONE) return sql_error(write_db_, "insert stored sample");
    *last_mark = sqlite3_last_insert_rowid(write_db_);
    sqlite3_reset(mark.get());
  }
  return Status();
}

Status SqliteBackend::write(const WriteBatch& batch) {
  std::lock_guard<std::mutex> lock(write_mu_);
  Status status = exec(write_db_, "BEGIN");
  if (status.ok() && stored_samples_done_ > 0) {
    status = exec(write_db_, "DELETE FROM stored_samples WHERE rowid <= " + std::to_string(stored_samples_done_));
  }
  std::int64_t last_mark = 0;
  if (status.ok()) status = insert_records(batch.records);
  if (status.ok()) status = insert_rest(batch, &last_mark);
  if (status.ok()) status = exec(write_db_, "COMMIT");
  if (!status.ok()) {
    (void)exec(write_db_, "ROLLBACK");
    return status;
  }
  if (last_mark > 0) stored_samples_done_ = last_mark;
  return Status();
}

Result<std::vector<SampleTicket>> SqliteBackend::unstored(const std::vector<SampleTicket>& accepted) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_, "SELECT 1 FROM stored_samples WHERE boot = ? AND seq = ?");
  if (!q.ok()) return sql_error(read_db_, "read stored_samples");
  std::vector<SampleTicket> lost;
  for (const SampleTicket& a : accepted) {
    q.integer(1, static_cast<std::int64_t>(a.boot));
    q.integer(2, static_cast<std::int64_t>(a.seq));
    const int rc = sqlite3_step(q.get());
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_error(read_db_, "read stored_samples");
    if (rc == SQLITE_DONE) lost.push_back(a);
    sqlite3_reset(q.get());
  }
  return lost;
}

Result<std::uint64_t> SqliteBackend::delete_before(double time) {
  std::lock_guard<std::mutex> lock(write_mu_);
  std::uint64_t deleted = 0;
  for (const char* table : {"records", "gemm_outputs", "scalars"}) {
    Statement d(write_db_, std::string("DELETE FROM ") + table + " WHERE time < ?");
    if (!d.ok()) return sql_error(write_db_, std::string("retention of ") + table);
    d.real(1, time);
    if (sqlite3_step(d.get()) != SQLITE_DONE) return sql_error(write_db_, std::string("retention of ") + table);
    if (std::string(table) == "records") deleted = static_cast<std::uint64_t>(sqlite3_changes(write_db_));
  }
  return deleted;
}

Result<std::uint64_t> SqliteBackend::count(const HistoryFilter& f) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_, std::string("SELECT COUNT(*)") + kFilterWhere);
  if (!q.ok()) return sql_error(read_db_, "count");
  bind_filter(q, f);
  if (sqlite3_step(q.get()) != SQLITE_ROW) return sql_error(read_db_, "count");
  return static_cast<std::uint64_t>(sqlite3_column_int64(q.get(), 0));
}

Status SqliteBackend::query(const HistoryFilter& f, const std::function<bool(const HistoryRecord&)>& each) const {
  std::string sql = "SELECT time, job, run, rank, step, layer, gemm, operand, dtype, numel, recipe, format, scale, "
                    "scale_max, scale_current, histogram, id";
  for (std::size_t c = 0; c < std::size(kLateRecordColumns); ++c) {
    sql += late_columns_[c] ? std::string(", ") + kLateRecordColumns[c] : std::string(", NULL");
  }
  for (std::size_t k = 0; k < statistics().size(); ++k) {
    sql += stat_columns_[k] ? ", " + stat_column(statistics()[k]) : std::string(", NULL");
  }
  sql += std::string(kFilterWhere) + " ORDER BY id LIMIT ?9";
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_, sql);
  if (!q.ok()) return sql_error(read_db_, "query");
  bind_filter(q, f);
  q.integer(9, f.limit == 0 ? -1 : f.limit);
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    HistoryRecord r;
    r.time = sqlite3_column_double(q.get(), 0);
    r.job = q.column_text(1);
    r.run = q.column_text(2);
    r.rank = static_cast<std::uint32_t>(sqlite3_column_int64(q.get(), 3));
    r.step = static_cast<std::uint64_t>(sqlite3_column_int64(q.get(), 4));
    r.layer = q.column_text(5);
    const std::optional<Operand> operand = operand_from_name(q.column_text(7));
    if (!operand) continue;  // a file from before version 2 keeps GEMM checks here (operand "y")
    r.gemm = gemm_from_name(q.column_text(6)).value_or(GemmRole::kUnknown);
    r.operand = *operand;
    r.dtype = q.column_text(8);
    r.numel = sqlite3_column_int64(q.get(), 9);
    r.recipe = q.column_text(10);
    r.format = q.column_text(11);
    r.scale = sqlite3_column_double(q.get(), 12);
    r.scale_max = sqlite3_column_double(q.get(), 13);
    r.scale_current = sqlite3_column_double(q.get(), 14);
    r.histogram = q.column_counts(15);
    r.id = static_cast<std::uint64_t>(sqlite3_column_int64(q.get(), 16));
    r.codes_digest = q.column_text(17);
    r.scale_layout = q.column_text(18);
    r.gemm_alpha = sqlite3_column_double(q.get(), 19);
    r.scale_histogram = q.column_counts(20);
    r.host = q.column_text(21);
    for (std::size_t k = 0; k < statistics().size(); ++k) r.statistics.push_back(q.column_real_or_nan(22 + static_cast<int>(k)));
    if (!each(r)) return Status();
  }
  return rc == SQLITE_DONE ? Status() : sql_error(read_db_, "query");
}

Status SqliteBackend::query_scalars(const std::string& run, const std::string& name,
                                    const std::function<bool(const ScalarRecord&)>& each) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_, std::string("SELECT time, job, run, ") + (has_scalar_host_ ? "host" : "''") +
                            ", rank, step, name, value FROM scalars WHERE (?1 = '' OR run = ?1) AND (?2 = '' OR name = ?2) ORDER BY step, rank");
  if (!q.ok()) return sql_error(read_db_, "query scalars");
  q.text(1, run);
  q.text(2, name);
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    ScalarRecord s;
    read_key(q, s);
    s.name = q.column_text(6);
    s.value = sqlite3_column_double(q.get(), 7);
    if (!each(s)) return Status();
  }
  return rc == SQLITE_DONE ? Status() : sql_error(read_db_, "query scalars");
}

Status SqliteBackend::query_gemm_outputs(const std::string& run,
                                         const std::function<bool(const GemmOutputRecord&)>& each) const {
  if (!has_gemm_outputs_) return Status();
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_,
              "SELECT time, job, run, host, rank, step, layer, accumulate, numel, scale_x, scale_w, mse, cosine, "
              "max_rel_error FROM gemm_outputs WHERE (?1 = '' OR run = ?1) ORDER BY step, id");
  if (!q.ok()) return sql_error(read_db_, "query GEMM outputs");
  q.text(1, run);
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    GemmOutputRecord g;
    read_key(q, g);
    g.layer = q.column_text(6);
    g.accumulate = q.column_text(7);
    g.numel = sqlite3_column_int64(q.get(), 8);
    g.scale_x = q.column_real_or_nan(9);
    g.scale_w = q.column_real_or_nan(10);
    g.mse = q.column_real_or_nan(11);
    g.cosine = q.column_real_or_nan(12);
    g.max_rel_error = q.column_real_or_nan(13);
    if (!each(g)) return Status();
  }
  return rc == SQLITE_DONE ? Status() : sql_error(read_db_, "query GEMM outputs");
}

}  // namespace

Result<std::unique_ptr<Backend>> open_sqlite_backend(const std::string& path, bool read_only) {
  Result<sqlite3*> r = open_db(path, read_only);
  if (!r.ok()) return r.status();
  sqlite3* read_db = r.value();
  if (read_only) {
    if (Status s = check_schema_version(schema_version(read_db), kLatestVersion, path); !s.ok()) {
      sqlite3_close(read_db);
      return s;
    }
    if (!has_table(read_db, "records")) {
      sqlite3_close(read_db);
      return Status::error(path + ": not an fp8scope history (no records table)");
    }
    return std::unique_ptr<Backend>(new SqliteBackend(path, nullptr, read_db));
  }
  sqlite3_close(read_db);
  Result<sqlite3*> w = open_db(path, false);
  if (!w.ok()) return w.status();
  if (Status s = migrate(w.value(), path); !s.ok()) {
    sqlite3_close(w.value());
    return Status::error(s.message().rfind(path, 0) == 0 ? s.message() : path + ": " + s.message());
  }
  Result<sqlite3*> reader = open_db(path, false);
  if (!reader.ok()) {
    sqlite3_close(w.value());
    return reader.status();
  }
  return std::unique_ptr<Backend>(new SqliteBackend(path, w.value(), reader.value()));
}

}  // namespace fp8scope::history
