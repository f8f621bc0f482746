#include "postgres_backend.h"

#include <libpq-fe.h>

#include <charconv>
#include <limits>
#include <mutex>
#include <optional>
#include <set>

#include "columns.h"
#include "url_redaction.h"
#include "fp8scope/pattern/layer_pattern.h"
#include "postgres_connection.h"
#include "postgres_migrations.h"

namespace fp8scope::history {
namespace {

template <class Record>
void copy_rows(CopyRows& out, const std::vector<Column<Record>>& columns, const std::vector<Record>& rows) {
  for (const Record& r : rows) {
    put_row(columns, r, out);
    out.end_row();
  }
}

class PostgresBackend final : public Backend {
 public:
  PostgresBackend(std::string url, std::string writer, PGconn* write_db, PGconn* read_db)
      : url_(std::move(url)), location_(redact_url(url_)), writer_(std::move(writer)), write_db_(write_db), read_db_(read_db) {}
  ~PostgresBackend() override {
    PQfinish(read_db_);
    if (write_db_ != nullptr) PQfinish(write_db_);
  }

  std::string location() const override { return location_; }
  std::uint64_t records_at_open() const override { return 0; }

  Status write(const WriteBatch& batch) override;
  Result<std::vector<SampleTicket>> unstored(const std::vector<SampleTicket>& accepted) const override;
  Status forget_stored_samples() override;
  Result<std::uint64_t> delete_before(double time) override;

  Status query(const HistoryFilter& filter, const std::function<bool(const HistoryRecord&)>& each) const override;
  Result<std::uint64_t> count(const HistoryFilter& filter) const override;
  Status query_scalars(const std::string& run, const std::string& name,
                       const std::function<bool(const ScalarRecord&)>& each) const override;
  Status query_gemm_outputs(const std::string& run,
                            const std::function<bool(const GemmOutputRecord&)>& each) const override;

 private:
  // A connection that dropped (the server restarted, the network failed) is reset before use.
  Status ready(PGconn* db) const;
  Status error(PGconn* db, const std::string& what) const {
    return Status::error(location_ + ": " + what + ": " + trim_message(PQerrorMessage(db)));
  }
  Status command(PGconn* db, const std::string& sql, const std::vector<std::string>& params = {}) const;
  Status copy(PGconn* db, const std::string& table_and_columns, const std::string& rows) const;
  // Streams a query's rows one at a time (libpq's single-row mode): the result is never held whole.
  Status stream(const std::string& sql, const std::vector<std::string>& params,
                const std::function<bool(const PgResult&)>& row) const;
  Status stream_once(const std::string& sql, const std::vector<std::string>& params,
                     const std::function<bool(const PgResult&)>& row, bool& delivered) const;

  std::string url_, location_, writer_;
  PGconn* write_db_;
  PGconn* read_db_;
  // A libpq connection serves one thread at a time: the writer's batches and retention, and the
  // start-up's ticket cleanup, take turns on write_db_.
  std::mutex write_mu_;
  mutable std::mutex read_mu_;
  std::int64_t stored_samples_done_ = 0;  // as in the SQLite backend: deleted by the next batch
};

Status PostgresBackend::ready(PGconn* db) const {
  if (PQstatus(db) == CONNECTION_OK) return Status();
  PQreset(db);
  if (PQstatus(db) == CONNECTION_OK) return Status();
  return Status::error("cannot reach PostgreSQL at " + location_ + ": " + trim_message(PQerrorMessage(db)));
}

Status PostgresBackend::command(PGconn* db, const std::string& sql, const std::vector<std::string>& params) const {
  std::vector<const char*> values;
  for (const std::string& p : params) values.push_back(p.c_str());
  PgResult r(PQexecParams(db, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0));
  if (r.status() == PGRES_COMMAND_OK || r.status() == PGRES_TUPLES_OK) return Status();
  return error(db, sql.substr(0, sql.find_first_of(" (")));
}

Status PostgresBackend::copy(PGconn* db, const std::string& table_and_columns, const std::string& rows) const {
  if (rows.empty()) return Status();
  PgResult start(PQexec(db, ("COPY " + table_and_columns + " FROM STDIN").c_str()));
  if (start.status() != PGRES_COPY_IN) return error(db, "COPY " + table_and_columns.substr(0, table_and_columns.find(' ')));
  if (PQputCopyData(db, rows.data(), static_cast<int>(rows.size())) != 1 || PQputCopyEnd(db, nullptr) != 1) {
    return error(db, "COPY data");
  }
  for (PgResult r(PQgetResult(db)); r.get() != nullptr; r = PgResult(PQgetResult(db))) {
    if (r.status() != PGRES_COMMAND_OK) return error(db, "COPY " + table_and_columns.substr(0, table_and_columns.find(' ')));
  }
  return Status();
}

Status PostgresBackend::write(const WriteBatch& batch) {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (Status s = ready(write_db_); !s.ok()) return s;
  CopyRows records, outputs, scalars, marks;
  copy_rows(records, record_columns(), batch.records);
  copy_rows(outputs, gemm_output_columns(), batch.gemm_outputs);
  copy_rows(scalars, scalar_columns(), batch.scalars);
  for (const SampleTicket& t : batch.stored_samples) {
    marks.text(writer_);
    marks.integer(static_cast<std::int64_t>(t.boot));
    marks.integer(static_cast<std::int64_t>(t.seq));
    marks.end_row();
  }
  Status s = command(write_db_, "BEGIN");
  if (s.ok() && stored_samples_done_ > 0) {
    s = command(write_db_, "DELETE FROM fp8scope.stored_samples WHERE writer = $1 AND id <= $2",
                {writer_, std::to_string(stored_samples_done_)});
  }
  if (s.ok()) s = copy(write_db_, "fp8scope.records (" + column_names(record_columns()) + ")", records.data());
  if (s.ok()) s = copy(write_db_, "fp8scope.gemm_outputs (" + column_names(gemm_output_columns()) + ")", outputs.data());
  if (s.ok()) s = copy(write_db_, "fp8scope.scalars (" + column_names(scalar_columns()) + ")", scalars.data());
  if (s.ok()) s = copy(write_db_, "fp8scope.stored_samples (writer, boot, seq)", marks.data());
  std::int64_t last_mark = 0;
  if (s.ok() && !batch.stored_samples.empty()) {
    PgResult id(PQexec(write_db_, "SELECT currval(pg_get_serial_sequence('fp8scope.stored_samples', 'id'))"));
    if (id.status() != PGRES_TUPLES_OK) {
      s = error(write_db_, "stored_samples id");
    } else {
      last_mark = id.integer(0, 0);
    }
  }
  if (s.ok()) s = command(write_db_, "COMMIT");
  if (!s.ok()) {
    PgResult(PQexec(write_db_, "ROLLBACK"));
    return s;
  }
  if (last_mark > 0) stored_samples_done_ = last_mark;
  return Status();
}

Result<std::vector<SampleTicket>> PostgresBackend::unstored(const std::vector<SampleTicket>& accepted) const {
  std::set<std::pair<std::uint64_t, std::uint64_t>> stored;
  Status s = stream("SELECT boot, seq FROM fp8scope.stored_samples WHERE writer = $1", {writer_}, [&](const PgResult& r) {
    stored.emplace(static_cast<std::uint64_t>(r.integer(0, 0)), static_cast<std::uint64_t>(r.integer(0, 1)));
    return true;
  });
  if (!s.ok()) return s;
  std::vector<SampleTicket> lost;
  for (const SampleTicket& a : accepted) {
    if (!stored.count({a.boot, a.seq})) lost.push_back(a);
  }
  return lost;
}

Status PostgresBackend::forget_stored_samples() {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (Status s = ready(write_db_); !s.ok()) return s;
  return command(write_db_, "DELETE FROM fp8scope.stored_samples WHERE writer = $1", {writer_});
}

Result<std::uint64_t> PostgresBackend::delete_before(double time) {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (Status s = ready(write_db_); !s.ok()) return s;
  std::uint64_t deleted = 0;
  for (const char* table : {"records", "gemm_outputs", "scalars"}) {
    char t[32];
    const std::string bound(t, std::to_chars(t, t + sizeof t, time).ptr);
    const std::string sql = std::string("DELETE FROM fp8scope.") + table + " WHERE time < $1";
    const char* values[] = {bound.c_str()};
    PgResult r(PQexecParams(write_db_, sql.c_str(), 1, nullptr, values, nullptr, nullptr, 0));
    if (r.status() != PGRES_COMMAND_OK) return error(write_db_, std::string("retention of ") + table);
    if (std::string(table) == "records") deleted = std::strtoull(PQcmdTuples(r.get()), nullptr, 10);
  }
  return deleted;
}

Status PostgresBackend::stream(const std::string& sql, const std::vector<std::string>& params,
                               const std::function<bool(const PgResult&)>& row) const {
  std::lock_guard<std::mutex> lock(read_mu_);
  bool delivered = false;
  Status s = stream_once(sql, params, row, delivered);
  // A connection the server dropped since the last read (it restarted) is only found out now: once
  // more on a fresh one, unless rows were already handed out.
  if (!s.ok() && !delivered && PQstatus(read_db_) == CONNECTION_BAD) s = stream_once(sql, params, row, delivered);
  return s;
}

Status PostgresBackend::stream_once(const std::string& sql, const std::vector<std::string>& params,
                                    const std::function<bool(const PgResult&)>& row, bool& delivered) const {
  if (Status s = ready(read_db_); !s.ok()) return s;
  std::vector<const char*> values;
  for (const std::string& p : params) values.push_back(p.c_str());
  if (!PQsendQueryParams(read_db_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                         nullptr, 0) ||
      !PQsetSingleRowMode(read_db_)) {
    return error(read_db_, "query");
  }
  Status status;
  bool wanted = true;
  for (PgResult r(PQgetResult(read_db_)); r.get() != nullptr; r = PgResult(PQgetResult(read_db_))) {
    if (r.status() == PGRES_SINGLE_TUPLE) {
      delivered = true;
      if (wanted) wanted = row(r);
      if (!wanted && PQrequestCancel(read_db_) == 0) status = error(read_db_, "cancel");
    } else if (r.status() != PGRES_TUPLES_OK && wanted && status.ok()) {
      status = error(read_db_, "query");
    }
  }
  return status;
}

// The filter's SQL; the layer pattern is applied here, with the daemon's linear-time matcher, not
// PostgreSQL's regular expressions (another dialect, and not linear-time).
std::string filter_where(const HistoryFilter& f, std::vector<std::string>& params) {
  auto bound = [](std::uint64_t step) {
    return std::to_string(std::min<std::uint64_t>(step, std::numeric_limits<std::int64_t>::max()));
  };
  std::string where = " FROM fp8scope.records WHERE step >= $1 AND id > $2";
  params = {bound(f.min_step), bound(f.after_id)};
  auto add = [&](const char* column, const std::string& value) {
    params.push_back(value);
    where += std::string(" AND ") + column + " = $" + std::to_string(params.size());
  };
  if (f.max_step != 0) {
    params.push_back(bound(f.max_step));
    where += " AND step <= $" + std::to_string(params.size());
  }
  if (!f.job.empty()) add("job", f.job);
  if (!f.run.empty()) add("run", f.run);
  if (f.gemm) add("gemm", gemm_name(*f.gemm));
  if (f.operand) add("operand", operand_name(*f.operand));
  if (f.caster) add("recipe", f.caster->name());
  if (f.expert) add("expert", std::to_string(*f.expert));
  return where;
}

Result<std::optional<LayerPattern>> compile_filter(const HistoryFilter& f) {
  if (f.layer_regex.empty()) return std::optional<LayerPattern>();
  std::string error;
  std::optional<LayerPattern> p = LayerPattern::compile(f.layer_regex, &error);
  if (!p) return Status::error("layer pattern: " + error);
  return p;
}

Result<std::uint64_t> PostgresBackend::count(const HistoryFilter& f) const {
  Result<std::optional<LayerPattern>> pattern = compile_filter(f);
  if (!pattern.ok()) return pattern.status();
  std::vector<std::string> params;
  const std::string where = filter_where(f, params);
  std::uint64_t n = 0;
  Status s = stream("SELECT layer, COUNT(*)" + where + " GROUP BY layer", params, [&](const PgResult& r) {
    if (!pattern.value() || pattern.value()->search(r.text(0, 0))) n += static_cast<std::uint64_t>(r.integer(0, 1));
    return true;
  });
  if (!s.ok()) return s;
  return n;
}

Status PostgresBackend::query(const HistoryFilter& f, const std::function<bool(const HistoryRecord&)>& each) const {
  Result<std::optional<LayerPattern>> pattern = compile_filter(f);
  if (!pattern.ok()) return pattern.status();
  std::vector<std::string> params;
  std::string sql = "SELECT id, layer, " + column_names(record_columns()) + filter_where(f, params) + " ORDER BY id";
  if (f.limit != 0 && !pattern.value()) sql += " LIMIT " + std::to_string(f.limit);
  std::uint32_t rows = 0;
  return stream(sql, params, [&](const PgResult& q) {
    if (pattern.value() && !pattern.value()->search(q.text(0, 1))) return true;
    HistoryRecord r;
    PgRow row(q, 2);
    if (!get_row(record_columns(), row, r)) return true;
    r.id = static_cast<std::uint64_t>(q.integer(0, 0));
    return each(r) && (f.limit == 0 || ++rows < f.limit);
  });
}

Status PostgresBackend::query_scalars(const std::string& run, const std::string& name,
                                      const std::function<bool(const ScalarRecord&)>& each) const {
  return stream("SELECT " + column_names(scalar_columns()) +
                    " FROM fp8scope.scalars WHERE ($1 = '' OR run = $1) AND ($2 = '' OR name = $2) ORDER BY step, rank, id",
                {run, name}, [&](const PgResult& q) {
                  ScalarRecord s;
                  PgRow row(q, 0);
                  return !get_row(scalar_columns(), row, s) || each(s);
                });
}

Status PostgresBackend::query_gemm_outputs(const std::string& run,
                                           const std::function<bool(const GemmOutputRecord&)>& each) const {
  return stream("SELECT " + column_names(gemm_output_columns()) +
                    " FROM fp8scope.gemm_outputs WHERE ($1 = '' OR run = $1) ORDER BY step, id",
                {run}, [&](const PgResult& q) {
                  GemmOutputRecord g;
                  PgRow row(q, 0);
                  return !get_row(gemm_output_columns(), row, g) || each(g);
                });
}

}  // namespace

Result<std::unique_ptr<Backend>> open_postgres_backend(const std::string& url, const std::string& writer) {
  const std::string location = redact_url(url);
  Result<PGconn*> reader = connect_postgres(url, location);
  if (!reader.ok()) return reader.status();
  if (writer.empty()) {
    if (Status s = check_postgres_readable(reader.value(), location); !s.ok()) {
      PQfinish(reader.value());
      return s;
    }
    return std::unique_ptr<Backend>(new PostgresBackend(url, writer, nullptr, reader.value()));
  }
  Result<PGconn*> w = connect_postgres(url, location);
  if (!w.ok()) {
    PQfinish(reader.value());
    return w.status();
  }
  if (Status s = migrate_postgres(w.value(), location); !s.ok()) {
    PQfinish(reader.value());
    PQfinish(w.value());
    return s;
  }
  return std::unique_ptr<Backend>(new PostgresBackend(url, writer, w.value(), reader.value()));
}

}  // namespace fp8scope::history
