#include "sqlite_backend.h"

#include <limits>
#include <mutex>

#include "columns.h"
#include "sqlite_connection.h"
#include "sqlite_migrations.h"

namespace fp8scope::history {
namespace {

const char* kFilterWhere =
    " FROM records WHERE step >= ?1 AND (?2 = 0 OR step <= ?2) AND (?3 = '' OR job = ?3) AND (?4 = '' OR run = ?4)"
    " AND (?5 = '' OR layer REGEXP ?5) AND (?6 = '' OR gemm = ?6) AND (?7 = '' OR operand = ?7)"
    " AND (?8 = '' OR recipe = ?8) AND id > ?10";

// Steps are stored as SQLite's signed INTEGER; bounds past its largest value select up to it (the
// daemon refuses larger steps) rather than wrapping negative.
std::int64_t bound(std::uint64_t v) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(v, std::numeric_limits<std::int64_t>::max()));
}

void bind_filter(Statement& q, const HistoryFilter& f) {
  q.integer(1, bound(f.min_step));
  q.integer(2, bound(f.max_step));
  q.text(3, f.job);
  q.text(4, f.run);
  q.text(5, f.layer_regex);
  q.text(6, f.gemm ? gemm_name(*f.gemm) : "");
  q.text(7, f.operand ? operand_name(*f.operand) : "");
  q.text(8, f.caster ? f.caster->name() : "");
  q.integer(10, bound(f.after_id));
  if (f.expert) q.integer(11, *f.expert);
}

// Only a filter by expert names the expert column, which an older file opened read-only may lack.
std::string filter_where(const HistoryFilter& f) { return kFilterWhere + std::string(f.expert ? " AND expert = ?11" : ""); }

// A table's columns as this file has them: an older file opened read-only may lack later ones,
// which read as NULL.
template <class Record>
std::string select_list(sqlite3* db, const char* table, const std::vector<Column<Record>>& columns) {
  std::string list;
  for (const Column<Record>& c : columns) {
    list += (list.empty() ? "" : ", ") + (has_column(db, table, c.name) ? c.name : std::string("NULL"));
  }
  return list;
}

template <class Record>
std::string insert_statement(const char* table, const std::vector<Column<Record>>& columns) {
  std::string values;
  for (std::size_t i = 0; i < columns.size(); ++i) values += i ? ",?" : "?";
  return std::string("INSERT INTO ") + table + " (" + column_names(columns) + ") VALUES (" + values + ")";
}

template <class Record>
Status insert_rows(sqlite3* db, const char* table, const std::vector<Column<Record>>& columns,
                   const std::vector<Record>& rows) {
  if (rows.empty()) return Status();
  Statement q(db, insert_statement(table, columns));
  if (!q.ok()) return sql_error(db, std::string("prepare insert into ") + table);
  for (const Record& r : rows) {
    BoundRow bound_row(q, 1);
    put_row(columns, r, bound_row);
    if (sqlite3_step(q.get()) != SQLITE_DONE) return sql_error(db, std::string("insert into ") + table);
    sqlite3_reset(q.get());
  }
  return Status();
}

// Streams a statement's rows as records (columns from `first` on); each returns false to stop.
template <class Record>
Status read_rows(sqlite3* db, Statement& q, const std::vector<Column<Record>>& columns, int first, const char* what,
                 const std::function<bool(Record&)>& each) {
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    Record r;
    ReadRow row(q, first);
    if (!get_row(columns, row, r)) continue;
    if (!each(r)) return Status();
  }
  return rc == SQLITE_DONE ? Status() : sql_error(db, what);
}

class SqliteBackend final : public Backend {
 public:
  SqliteBackend(std::string path, sqlite3* write_db, sqlite3* read_db)
      : path_(std::move(path)), write_db_(write_db), read_db_(read_db) {
    records_select_ = select_list(read_db_, "records", record_columns());
    scalars_select_ = select_list(read_db_, "scalars", scalar_columns());
    if (has_table(read_db_, "gemm_outputs")) gemm_outputs_select_ = select_list(read_db_, "gemm_outputs", gemm_output_columns());
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
  Status insert_marks(const std::vector<SampleTicket>& tickets, std::int64_t* last_mark);

  std::string path_;
  sqlite3* write_db_;
  sqlite3* read_db_;
  // A batch's transaction spans many calls: retention and the start-up's ticket cleanup wait for it.
  std::mutex write_mu_;
  mutable std::mutex read_mu_;
  std::string records_select_, scalars_select_, gemm_outputs_select_;  // "" = no such table
  std::uint64_t records_at_open_ = 0;
  // The last committed batch's stored_samples rows (up to this rowid; 0 = none): released by then,
  // deleted in the next batch.
  std::int64_t stored_samples_done_ = 0;
};

Status SqliteBackend::insert_marks(const std::vector<SampleTicket>& tickets, std::int64_t* last_mark) {
  Statement mark(write_db_, "INSERT INTO stored_samples VALUES (?,?)");
  if (!mark.ok()) return sql_error(write_db_, "prepare insert stored sample");
  for (const SampleTicket& t : tickets) {
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
  if (status.ok()) status = insert_rows(write_db_, "records", record_columns(), batch.records);
  if (status.ok()) status = insert_rows(write_db_, "scalars", scalar_columns(), batch.scalars);
  if (status.ok()) status = insert_rows(write_db_, "gemm_outputs", gemm_output_columns(), batch.gemm_outputs);
  if (status.ok()) status = insert_marks(batch.stored_samples, &last_mark);
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
  Statement q(read_db_, "SELECT COUNT(*)" + filter_where(f));
  if (!q.ok()) return sql_error(read_db_, "count");
  bind_filter(q, f);
  if (sqlite3_step(q.get()) != SQLITE_ROW) return sql_error(read_db_, "count");
  return static_cast<std::uint64_t>(sqlite3_column_int64(q.get(), 0));
}

Status SqliteBackend::query(const HistoryFilter& f, const std::function<bool(const HistoryRecord&)>& each) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_, "SELECT id, " + records_select_ + filter_where(f) + " ORDER BY id LIMIT ?9");
  if (!q.ok()) return sql_error(read_db_, "query");
  bind_filter(q, f);
  q.integer(9, f.limit == 0 ? -1 : f.limit);
  return read_rows<HistoryRecord>(read_db_, q, record_columns(), 1, "query", [&](HistoryRecord& r) {
    r.id = static_cast<std::uint64_t>(sqlite3_column_int64(q.get(), 0));
    return each(r);
  });
}

Status SqliteBackend::query_scalars(const std::string& run, const std::string& name,
                                    const std::function<bool(const ScalarRecord&)>& each) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_, "SELECT " + scalars_select_ +
                            " FROM scalars WHERE (?1 = '' OR run = ?1) AND (?2 = '' OR name = ?2) ORDER BY step, rank");
  if (!q.ok()) return sql_error(read_db_, "query scalars");
  q.text(1, run);
  q.text(2, name);
  return read_rows<ScalarRecord>(read_db_, q, scalar_columns(), 0, "query scalars",
                                 [&](ScalarRecord& s) { return each(s); });
}

Status SqliteBackend::query_gemm_outputs(const std::string& run,
                                         const std::function<bool(const GemmOutputRecord&)>& each) const {
  if (gemm_outputs_select_.empty()) return Status();
  std::lock_guard<std::mutex> lock(read_mu_);
  Statement q(read_db_, "SELECT " + gemm_outputs_select_ + " FROM gemm_outputs WHERE (?1 = '' OR run = ?1) ORDER BY step, id");
  if (!q.ok()) return sql_error(read_db_, "query GEMM outputs");
  q.text(1, run);
  return read_rows<GemmOutputRecord>(read_db_, q, gemm_output_columns(), 0, "query GEMM outputs",
                                     [&](GemmOutputRecord& g) { return each(g); });
}

}  // namespace

Result<std::unique_ptr<Backend>> open_sqlite_backend(const std::string& path, bool read_only) {
  Result<sqlite3*> r = open_db(path, read_only);
  if (!r.ok()) return r.status();
  sqlite3* read_db = r.value();
  if (read_only) {
    if (Status s = check_sqlite_readable(read_db, path); !s.ok()) {
      sqlite3_close(read_db);
      return s;
    }
    return std::unique_ptr<Backend>(new SqliteBackend(path, nullptr, read_db));
  }
  sqlite3_close(read_db);
  Result<sqlite3*> w = open_db(path, false);
  if (!w.ok()) return w.status();
  if (Status s = migrate_sqlite(w.value(), path); !s.ok()) {
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
