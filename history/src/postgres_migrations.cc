#include "postgres_migrations.h"

#include <set>

#include "columns.h"
#include "postgres_connection.h"
#include "schema_migrations.h"

namespace fp8scope::history {
namespace {

constexpr const char* kId = "id BIGSERIAL PRIMARY KEY";

Status run(PGconn* db, const std::string& sql, const std::string& location) {
  PgResult r(PQexec(db, sql.c_str()));
  if (r.status() == PGRES_COMMAND_OK || r.status() == PGRES_TUPLES_OK) return Status();
  return Status::error(location + ": " + trim_message(PQerrorMessage(db)));
}

// Version 1: the tables as the column lists say, indexed for reports, Grafana and retention.
const Migration<PGconn*> kMigrations[] = {
    {1, "records, GEMM outputs, scalars and stored samples, indexed for reports, Grafana and retention",
     [](PGconn*& db) -> Status {
       for (const std::string& sql :
            {create_table("fp8scope.records", kId, record_columns(), postgres_type),
             create_table("fp8scope.gemm_outputs", kId, gemm_output_columns(), postgres_type),
             create_table("fp8scope.scalars", kId, scalar_columns(), postgres_type),
             std::string("CREATE TABLE fp8scope.stored_samples (id BIGSERIAL PRIMARY KEY, writer TEXT NOT NULL, "
                         "boot BIGINT NOT NULL, seq BIGINT NOT NULL)")}) {
         if (Status s = run(db, sql, "create"); !s.ok()) return s;
       }
       return run(db, R"sql(
CREATE INDEX records_by_run ON fp8scope.records (run, id);
CREATE INDEX records_by_run_layer_step ON fp8scope.records (run, layer, step);
CREATE INDEX records_by_time ON fp8scope.records (time);
CREATE INDEX gemm_outputs_by_run ON fp8scope.gemm_outputs (run, step);
CREATE INDEX gemm_outputs_by_time ON fp8scope.gemm_outputs (time);
CREATE INDEX scalars_by_run ON fp8scope.scalars (run, name, step);
CREATE INDEX scalars_by_time ON fp8scope.scalars (time);
CREATE INDEX stored_samples_by_writer ON fp8scope.stored_samples (writer, id);
)sql", "create indexes");
     }},
};
constexpr int kLatestVersion = 1;

// The columns the database's table has, and the statements that add the ones it lacks.
template <class Record>
Status add_missing(PGconn* db, const char* table, const std::vector<Column<Record>>& columns, const std::string& location) {
  PgResult r(PQexecParams(db, "SELECT column_name FROM information_schema.columns WHERE table_schema = 'fp8scope' "
                              "AND table_name = $1", 1, nullptr, &table, nullptr, nullptr, 0));
  if (r.status() != PGRES_TUPLES_OK) return Status::error(location + ": " + trim_message(PQerrorMessage(db)));
  std::set<std::string> has;
  for (int i = 0; i < PQntuples(r.get()); ++i) has.insert(r.text(i, 0));
  for (const std::string& sql : add_missing_columns(std::string("fp8scope.") + table, columns,
                                                    [&](const std::string& c) { return has.count(c) != 0; }, postgres_type)) {
    if (Status s = run(db, sql, location); !s.ok()) return s;
  }
  return Status();
}

Result<int> version_at(PGconn* db, const std::string& location) {
  PgResult v(PQexec(db, "SELECT COALESCE(MAX(version), 0) FROM fp8scope.schema_version"));
  if (v.status() != PGRES_TUPLES_OK) return Status::error(location + ": " + trim_message(PQerrorMessage(db)));
  return static_cast<int>(v.integer(0, 0));
}

}  // namespace

Status migrate_postgres(PGconn* db, const std::string& location) {
  Status s = run(db, "BEGIN", location);
  if (s.ok()) s = run(db, "SELECT pg_advisory_xact_lock(8389431)", location);
  if (s.ok()) s = run(db, "CREATE SCHEMA IF NOT EXISTS fp8scope", location);
  if (s.ok()) {
    s = run(db, "CREATE TABLE IF NOT EXISTS fp8scope.schema_version (version INTEGER NOT NULL, time DOUBLE PRECISION NOT NULL)",
            location);
  }
  int at = 0;
  if (s.ok()) {
    Result<int> v = version_at(db, location);
    s = v.status();
    if (s.ok()) at = v.value();
  }
  if (s.ok()) s = check_schema_version(at, kLatestVersion, location);
  for (const Migration<PGconn*>& m : kMigrations) {
    if (!s.ok() || m.version <= at) continue;
    PGconn* handle = db;
    s = m.apply(handle);
    if (s.ok()) {
      s = run(db, "INSERT INTO fp8scope.schema_version VALUES (" + std::to_string(m.version) + ", extract(epoch from now()))",
              location);
    }
    if (!s.ok()) {
      s = Status::error(location + ": schema migration to version " + std::to_string(m.version) + " (" + m.change +
                        ") failed: " + s.message());
    }
  }
  if (s.ok()) s = add_missing(db, "records", record_columns(), location);
  if (s.ok()) s = add_missing(db, "gemm_outputs", gemm_output_columns(), location);
  if (s.ok()) s = add_missing(db, "scalars", scalar_columns(), location);
  if (s.ok()) return run(db, "COMMIT", location);
  PgResult(PQexec(db, "ROLLBACK"));
  return s;
}

Status check_postgres_readable(PGconn* db, const std::string& location) {
  PgResult v(PQexec(db, "SELECT COALESCE(MAX(version), 0) FROM fp8scope.schema_version"));
  if (v.status() != PGRES_TUPLES_OK) {
    return Status::error(location + ": no fp8scope history there (no fp8scope.schema_version table; a daemon started "
                                    "with --history on this database creates it)");
  }
  return check_schema_version(static_cast<int>(v.integer(0, 0)), kLatestVersion, location);
}

}  // namespace fp8scope::history
