#include "postgres_backend.h"

#include <libpq-fe.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <set>

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"
#include "schema_migrations.h"

namespace fp8scope::history {
namespace {

// Owns a PGresult.
class PgResult {
 public:
  explicit PgResult(PGresult* r = nullptr) : r_(r) {}
  ~PgResult() { PQclear(r_); }
  PgResult(PgResult&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  PgResult& operator=(PgResult&& o) noexcept {
    std::swap(r_, o.r_);
    return *this;
  }
  PGresult* get() const { return r_; }
  ExecStatusType status() const { return PQresultStatus(r_); }
  bool null(int row, int col) const { return PQgetisnull(r_, row, col) != 0; }
  std::string text(int row, int col) const { return PQgetvalue(r_, row, col); }
  double real(int row, int col) const {
    if (null(row, col)) return std::nan("");
    const char* v = PQgetvalue(r_, row, col);
    double d = 0;
    if (std::from_chars(v, v + PQgetlength(r_, row, col), d).ec != std::errc()) d = std::strtod(v, nullptr);  // Infinity
    return d;
  }
  std::int64_t integer(int row, int col) const {
    std::int64_t i = 0;
    const char* v = PQgetvalue(r_, row, col);
    std::from_chars(v, v + PQgetlength(r_, row, col), i);
    return i;
  }
  // A bigint[] in text form: {1,2,3}.
  std::vector<std::uint64_t> counts(int row, int col) const {
    std::vector<std::uint64_t> out;
    if (null(row, col)) return out;
    const char* p = PQgetvalue(r_, row, col);
    const char* end = p + PQgetlength(r_, row, col);
    while (p < end) {
      if (*p == '{' || *p == ',' || *p == '}') {
        ++p;
        continue;
      }
      std::uint64_t v = 0;
      auto [next, ec] = std::from_chars(p, end, v);
      if (ec != std::errc()) break;
      out.push_back(v);
      p = next;
    }
    return out;
  }

 private:
  PGresult* r_;
};

// COPY's text format: tab-separated, \N for NULL, backslash escapes.
class CopyRows {
 public:
  void text(const std::string& s) {
    sep();
    for (char c : s) {
      switch (c) {
        case '\\': buf_ += "\\\\"; break;
        case '\t': buf_ += "\\t"; break;
        case '\n': buf_ += "\\n"; break;
        case '\r': buf_ += "\\r"; break;
        default: buf_ += c;
      }
    }
  }
  void null() {
    sep();
    buf_ += "\\N";
  }
  void text_or_null(const std::string& s) { s.empty() ? null() : text(s); }
  void integer(std::int64_t v) {
    sep();
    char b[24];
    buf_.append(b, std::to_chars(b, b + sizeof b, v).ptr);
  }
  void real(double v) {
    sep();
    if (std::isnan(v)) {
      buf_ += "NaN";
    } else if (std::isinf(v)) {
      buf_ += v > 0 ? "Infinity" : "-Infinity";
    } else {
      char b[32];
      buf_.append(b, std::to_chars(b, b + sizeof b, v).ptr);
    }
  }
  void real_or_null(double v) { std::isnan(v) ? null() : real(v); }
  void counts(const std::vector<std::uint64_t>& v) {
    if (v.empty()) return null();
    sep();
    buf_ += '{';
    char b[24];
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) buf_ += ',';
      buf_.append(b, std::to_chars(b, b + sizeof b, v[i]).ptr);
    }
    buf_ += '}';
  }
  void end_row() {
    buf_ += '\n';
    first_ = true;
  }
  const std::string& data() const { return buf_; }

 private:
  void sep() {
    if (!first_) buf_ += '\t';
    first_ = false;
  }
  std::string buf_;
  bool first_ = true;
};

std::string stat_column(const Statistic& s) { return std::string("stat_") + s.key; }

// Every row begins with its key: time, job, run, host, rank, step.
template <typename Row>
void copy_key(CopyRows& c, const Row& r) {
  c.real(r.time);
  c.text(r.job);
  c.text(r.run);
  c.text(r.host);
  c.integer(r.rank);
  c.integer(static_cast<std::int64_t>(r.step));
}

template <typename Row>
void read_key(const PgResult& q, Row& r) {
  r.time = q.real(0, 0);
  r.job = q.text(0, 1);
  r.run = q.text(0, 2);
  r.host = q.text(0, 3);
  r.rank = static_cast<std::uint32_t>(q.integer(0, 4));
  r.step = static_cast<std::uint64_t>(q.integer(0, 5));
}

// The columns of fp8scope.records in COPY and SELECT order, statistics last.
std::string record_columns() {
  std::string c = "time, job, run, host, rank, step, layer, gemm, operand, dtype, numel, recipe, format, scale, "
                  "scale_max, scale_current, histogram, codes_digest, scale_layout, gemm_alpha, scale_histogram";
  for (const Statistic& s : statistics()) c += ", " + stat_column(s);
  return c;
}
constexpr const char* kScalarColumns = "time, job, run, host, rank, step, name, value";
constexpr const char* kGemmOutputColumns =
    "time, job, run, host, rank, step, layer, accumulate, numel, scale_x, scale_w, mse, cosine, max_rel_error";

// Everything fp8scope creates lives in schema fp8scope, so a shared database keeps its own tables.
const Migration<PGconn*> kMigrations[] = {
    {1, "records, GEMM outputs, scalars and stored samples, indexed for reports, Grafana and retention",
     [](PGconn*& db) -> Status {
       PgResult r(PQexec(db, R"sql(
CREATE TABLE fp8scope.records (
  id BIGSERIAL PRIMARY KEY, time DOUBLE PRECISION NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL,
  host TEXT NOT NULL, rank INTEGER NOT NULL, step BIGINT NOT NULL, layer TEXT NOT NULL, gemm TEXT NOT NULL,
  operand TEXT NOT NULL, dtype TEXT NOT NULL, numel BIGINT NOT NULL, recipe TEXT NOT NULL, format TEXT NOT NULL,
  scale DOUBLE PRECISION, scale_max DOUBLE PRECISION, scale_current DOUBLE PRECISION, histogram BIGINT[],
  codes_digest TEXT, scale_layout TEXT, gemm_alpha DOUBLE PRECISION, scale_histogram BIGINT[]);
CREATE INDEX records_by_run ON fp8scope.records (run, id);
CREATE INDEX records_by_run_layer_step ON fp8scope.records (run, layer, step);
CREATE INDEX records_by_time ON fp8scope.records (time);
CREATE TABLE fp8scope.gemm_outputs (
  id BIGSERIAL PRIMARY KEY, time DOUBLE PRECISION NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL,
  host TEXT NOT NULL, rank INTEGER NOT NULL, step BIGINT NOT NULL, layer TEXT NOT NULL, accumulate TEXT NOT NULL,
  numel BIGINT NOT NULL, scale_x DOUBLE PRECISION, scale_w DOUBLE PRECISION, mse DOUBLE PRECISION,
  cosine DOUBLE PRECISION, max_rel_error DOUBLE PRECISION);
CREATE INDEX gemm_outputs_by_run ON fp8scope.gemm_outputs (run, step);
CREATE INDEX gemm_outputs_by_time ON fp8scope.gemm_outputs (time);
CREATE TABLE fp8scope.scalars (
  id BIGSERIAL PRIMARY KEY, time DOUBLE PRECISION NOT NULL, job TEXT NOT NULL, run TEXT NOT NULL,
  host TEXT NOT NULL, rank INTEGER NOT NULL, step BIGINT NOT NULL, name TEXT NOT NULL, value DOUBLE PRECISION);
CREATE INDEX scalars_by_run ON fp8scope.scalars (run, name, step);
CREATE INDEX scalars_by_time ON fp8scope.scalars (time);
CREATE TABLE fp8scope.stored_samples (
  id BIGSERIAL PRIMARY KEY, writer TEXT NOT NULL, boot BIGINT NOT NULL, seq BIGINT NOT NULL);
CREATE INDEX stored_samples_by_writer ON fp8scope.stored_samples (writer, id);
)sql"));
       return r.status() == PGRES_COMMAND_OK ? Status() : Status::error(PQerrorMessage(db));
     }},
};
constexpr int kLatestVersion = 1;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
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
    return Status::error(location_ + ": " + what + ": " + trim(PQerrorMessage(db)));
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
  return Status::error("cannot reach PostgreSQL at " + location_ + ": " + trim(PQerrorMessage(db)));
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
  for (const HistoryRecord& r : batch.records) {
    copy_key(records, r);
    records.text(r.layer);
    records.text(gemm_name(r.gemm));
    records.text(operand_name(r.operand));
    records.text(r.dtype);
    records.integer(r.numel);
    records.text(r.recipe);
    records.text(r.format);
    for (double v : {r.scale, r.scale_max, r.scale_current}) records.real(v);
    records.counts(r.histogram);
    records.text_or_null(r.codes_digest);
    records.text_or_null(r.scale_layout);
    r.gemm_alpha == 0 ? records.null() : records.real(r.gemm_alpha);
    records.counts(r.scale_histogram);
    for (std::size_t k = 0; k < statistics().size(); ++k) {
      records.real_or_null(k < r.statistics.size() ? r.statistics[k] : std::nan(""));
    }
    records.end_row();
  }
  for (const GemmOutputRecord& g : batch.gemm_outputs) {
    copy_key(outputs, g);
    outputs.text(g.layer);
    outputs.text(g.accumulate);
    outputs.integer(g.numel);
    for (double v : {g.scale_x, g.scale_w, g.mse, g.cosine, g.max_rel_error}) outputs.real_or_null(v);
    outputs.end_row();
  }
  for (const ScalarRecord& s : batch.scalars) {
    copy_key(scalars, s);
    scalars.text(s.name);
    scalars.real(s.value);
    scalars.end_row();
  }
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
  if (s.ok()) s = copy(write_db_, "fp8scope.records (" + record_columns() + ")", records.data());
  if (s.ok()) s = copy(write_db_, std::string("fp8scope.gemm_outputs (") + kGemmOutputColumns + ")", outputs.data());
  if (s.ok()) s = copy(write_db_, std::string("fp8scope.scalars (") + kScalarColumns + ")", scalars.data());
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
  if (!f.recipe.empty()) add("recipe", f.recipe);
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
  std::string sql = "SELECT " + record_columns() + ", id" + filter_where(f, params) + " ORDER BY id";
  if (f.limit != 0 && !pattern.value()) sql += " LIMIT " + std::to_string(f.limit);
  std::uint32_t rows = 0;
  return stream(sql, params, [&](const PgResult& q) {
    if (pattern.value() && !pattern.value()->search(q.text(0, 6))) return true;
    HistoryRecord r;
    read_key(q, r);
    r.layer = q.text(0, 6);
    r.gemm = gemm_from_name(q.text(0, 7)).value_or(GemmRole::kUnknown);
    r.operand = operand_from_name(q.text(0, 8)).value_or(Operand::kX);
    r.dtype = q.text(0, 9);
    r.numel = q.integer(0, 10);
    r.recipe = q.text(0, 11);
    r.format = q.text(0, 12);
    r.scale = q.real(0, 13);
    r.scale_max = q.real(0, 14);
    r.scale_current = q.real(0, 15);
    r.histogram = q.counts(0, 16);
    r.codes_digest = q.text(0, 17);
    r.scale_layout = q.text(0, 18);
    r.gemm_alpha = q.null(0, 19) ? 0 : q.real(0, 19);
    r.scale_histogram = q.counts(0, 20);
    for (std::size_t k = 0; k < statistics().size(); ++k) r.statistics.push_back(q.real(0, 21 + static_cast<int>(k)));
    r.id = static_cast<std::uint64_t>(q.integer(0, 21 + static_cast<int>(statistics().size())));
    return each(r) && (f.limit == 0 || ++rows < f.limit);
  });
}

Status PostgresBackend::query_scalars(const std::string& run, const std::string& name,
                                      const std::function<bool(const ScalarRecord&)>& each) const {
  return stream(std::string("SELECT ") + kScalarColumns +
                    " FROM fp8scope.scalars WHERE ($1 = '' OR run = $1) AND ($2 = '' OR name = $2) ORDER BY step, rank, id",
                {run, name}, [&](const PgResult& q) {
                  ScalarRecord s;
                  read_key(q, s);
                  s.name = q.text(0, 6);
                  s.value = q.real(0, 7);
                  return each(s);
                });
}

Status PostgresBackend::query_gemm_outputs(const std::string& run,
                                           const std::function<bool(const GemmOutputRecord&)>& each) const {
  return stream(std::string("SELECT ") + kGemmOutputColumns +
                    " FROM fp8scope.gemm_outputs WHERE ($1 = '' OR run = $1) ORDER BY step, id",
                {run}, [&](const PgResult& q) {
                  GemmOutputRecord g;
                  read_key(q, g);
                  g.layer = q.text(0, 6);
                  g.accumulate = q.text(0, 7);
                  g.numel = q.integer(0, 8);
                  g.scale_x = q.real(0, 9);
                  g.scale_w = q.real(0, 10);
                  g.mse = q.real(0, 11);
                  g.cosine = q.real(0, 12);
                  g.max_rel_error = q.real(0, 13);
                  return each(g);
                });
}

Result<PGconn*> connect(const std::string& url, const std::string& location) {
  // The URL's own settings win over these defaults (libpq expands dbname last).
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "fp8scope", url.c_str(), nullptr};
  PGconn* db = PQconnectdbParams(keys, values, 1);
  if (db == nullptr) return Status::error(location + ": out of memory");
  if (PQstatus(db) != CONNECTION_OK) {
    Status s = Status::error("cannot connect to PostgreSQL at " + location + ": " + trim(PQerrorMessage(db)));
    PQfinish(db);
    return s;
  }
  PgResult quiet(PQexec(db, "SET client_min_messages = warning"));
  return db;
}

// The schema's version, under an advisory lock so that daemons starting together migrate once.
Status migrate(PGconn* db, const std::string& location) {
  auto run = [&](const char* sql) -> Status {
    PgResult r(PQexec(db, sql));
    if (r.status() == PGRES_COMMAND_OK || r.status() == PGRES_TUPLES_OK) return Status();
    return Status::error(location + ": " + trim(PQerrorMessage(db)));
  };
  Status s = run("BEGIN");
  if (s.ok()) s = run("SELECT pg_advisory_xact_lock(8389431)");
  if (s.ok()) s = run("CREATE SCHEMA IF NOT EXISTS fp8scope");
  if (s.ok()) s = run("CREATE TABLE IF NOT EXISTS fp8scope.schema_version (version INTEGER NOT NULL, time DOUBLE PRECISION NOT NULL)");
  int at = 0;
  if (s.ok()) {
    PgResult v(PQexec(db, "SELECT COALESCE(MAX(version), 0) FROM fp8scope.schema_version"));
    if (v.status() != PGRES_TUPLES_OK) {
      s = Status::error(location + ": " + trim(PQerrorMessage(db)));
    } else {
      at = static_cast<int>(v.integer(0, 0));
    }
  }
  if (s.ok()) s = check_schema_version(at, kLatestVersion, location);
  for (const Migration<PGconn*>& m : kMigrations) {
    if (!s.ok() || m.version <= at) continue;
    PGconn* handle = db;
    s = m.apply(handle);
    if (s.ok()) {
      s = run(("INSERT INTO fp8scope.schema_version VALUES (" + std::to_string(m.version) +
               ", extract(epoch from now()))").c_str());
    }
    if (!s.ok()) s = Status::error(location + ": schema migration to version " + std::to_string(m.version) + " (" + m.change + ") failed: " + s.message());
  }
  for (const Statistic& st : statistics()) {
    if (s.ok()) s = run(("ALTER TABLE fp8scope.records ADD COLUMN IF NOT EXISTS " + stat_column(st) + " DOUBLE PRECISION").c_str());
  }
  if (s.ok()) return run("COMMIT");
  PgResult(PQexec(db, "ROLLBACK"));
  return s;
}

Status check_readable(PGconn* db, const std::string& location) {
  PgResult v(PQexec(db, "SELECT COALESCE(MAX(version), 0) FROM fp8scope.schema_version"));
  if (v.status() != PGRES_TUPLES_OK) {
    return Status::error(location + ": no fp8scope history there (no fp8scope.schema_version table; a daemon started "
                                    "with --history on this database creates it)");
  }
  return check_schema_version(static_cast<int>(v.integer(0, 0)), kLatestVersion, location);
}

}  // namespace

std::string redact_url(const std::string& url) {
  std::string out = url;
  const std::size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const std::size_t start = scheme + 3;
    const std::size_t at = out.find('@', start);
    const std::size_t slash = out.find('/', start);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      const std::size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  for (std::size_t p = out.find("password="); p != std::string::npos; p = out.find("password=", p + 1)) {
    const std::size_t end = out.find('&', p);
    out.replace(p + 9, (end == std::string::npos ? out.size() : end) - p - 9, "***");
  }
  return out;
}

Result<std::unique_ptr<Backend>> open_postgres_backend(const std::string& url, const std::string& writer) {
  const std::string location = redact_url(url);
  Result<PGconn*> reader = connect(url, location);
  if (!reader.ok()) return reader.status();
  if (writer.empty()) {
    if (Status s = check_readable(reader.value(), location); !s.ok()) {
      PQfinish(reader.value());
      return s;
    }
    return std::unique_ptr<Backend>(new PostgresBackend(url, writer, nullptr, reader.value()));
  }
  Result<PGconn*> w = connect(url, location);
  if (!w.ok()) {
    PQfinish(reader.value());
    return w.status();
  }
  if (Status s = migrate(w.value(), location); !s.ok()) {
    PQfinish(reader.value());
    PQfinish(w.value());
    return s;
  }
  return std::unique_ptr<Backend>(new PostgresBackend(url, writer, w.value(), reader.value()));
}

}  // namespace fp8scope::history
