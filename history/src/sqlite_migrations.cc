#include "sqlite_migrations.h"

#include "columns.h"
#include "fp8scope/kernels/statistics_table.h"
#include "schema_migrations.h"
#include "sqlite_connection.h"

namespace fp8scope::history {
namespace {

Status add_columns(sqlite3* db, const std::vector<std::string>& statements) {
  for (const std::string& sql : statements) {
    if (Status s = exec(db, sql); !s.ok()) return s;
  }
  return Status();
}

template <class Record>
Status add_missing(sqlite3* db, const char* table, const std::vector<Column<Record>>& columns) {
  return add_columns(db, add_missing_columns(table, columns, [&](const std::string& c) { return has_column(db, table, c); },
                                             sqlite_type));
}

// What the daemons of each version wrote. Version 1 is the schema from before versions were
// recorded; its statements also bring such a file (which may lack the later columns) up to it.
// Frozen: these describe files that exist; the current schema is the column lists.
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
       for (const char* late : {"codes_digest TEXT", "scale_layout TEXT", "gemm_alpha REAL", "scale_histogram BLOB"}) {
         const std::string column(late, std::string_view(late).find(' '));
         if (!has_column(db, "records", column)) {
           if (Status s = exec(db, std::string("ALTER TABLE records ADD COLUMN ") + late); !s.ok()) return s;
         }
       }
       return Status();
     }},
    {2, "host in every key, GEMM checks in their own table, time index for retention",
     [](sqlite3*& db) -> Status {
       // It reads stat_mse and stat_cosine to move the GEMM checks.
       for (const Statistic& st : statistics()) {
         const std::string column = std::string("stat_") + st.key;
         if (has_column(db, "records", column)) continue;
         if (Status s = exec(db, "ALTER TABLE records ADD COLUMN " + column + " REAL"); !s.ok()) return s;
       }
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

// A new file: every table as the column lists say, indexed for reports, retention and Grafana.
Status create_latest(sqlite3* db) {
  for (const std::string& sql : {create_table("records", "id INTEGER PRIMARY KEY", record_columns(), sqlite_type),
                                 create_table("gemm_outputs", "id INTEGER PRIMARY KEY", gemm_output_columns(), sqlite_type),
                                 create_table("scalars", "", scalar_columns(), sqlite_type)}) {
    if (Status s = exec(db, sql); !s.ok()) return s;
  }
  return exec(db, R"sql(
CREATE TABLE stored_samples (boot INTEGER NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX records_by_run ON records(run, step);
CREATE INDEX records_by_layer ON records(layer, gemm, operand);
CREATE INDEX records_by_time ON records(time);
CREATE INDEX gemm_outputs_by_run ON gemm_outputs(run, step);
CREATE INDEX scalars_by_run ON scalars(run, name, step);
CREATE INDEX scalars_by_time ON scalars(time);
)sql");
}

Status record_version(sqlite3* db, int version) {
  Status s = exec(db, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, time REAL NOT NULL)");
  if (s.ok()) s = exec(db, "INSERT INTO schema_version VALUES (" + std::to_string(version) + ", unixepoch())");
  return s;
}

// One transaction: rolled back whole when any statement fails.
Status in_transaction(sqlite3* db, const std::function<Status()>& work) {
  Status s = exec(db, "BEGIN IMMEDIATE");
  if (s.ok()) s = work();
  if (s.ok()) s = exec(db, "COMMIT");
  if (!s.ok()) (void)exec(db, "ROLLBACK");
  return s;
}

}  // namespace

int sqlite_schema_version(sqlite3* db) {
  if (!has_table(db, "schema_version")) return 0;
  Statement q(db, "SELECT MAX(version) FROM schema_version");
  return q.ok() && sqlite3_step(q.get()) == SQLITE_ROW ? sqlite3_column_int(q.get(), 0) : 0;
}

Status check_sqlite_readable(sqlite3* db, const std::string& path) {
  if (Status s = check_schema_version(sqlite_schema_version(db), kLatestVersion, path); !s.ok()) return s;
  if (!has_table(db, "records")) return Status::error(path + ": not an fp8scope history (no records table)");
  return Status();
}

Status migrate_sqlite(sqlite3* db, const std::string& path) {
  if (Status s = exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s.ok()) return s;
  const int at = sqlite_schema_version(db);
  if (Status s = check_schema_version(at, kLatestVersion, path); !s.ok()) return s;
  if (at == 0 && !has_table(db, "records")) {
    Status s = in_transaction(db, [&] {
      Status c = create_latest(db);
      return c.ok() ? record_version(db, kLatestVersion) : c;
    });
    return s.ok() ? s : Status::error(path + ": creating the history failed: " + s.message());
  }
  for (const Migration<sqlite3*>& m : kMigrations) {
    if (m.version <= at) continue;
    Status s = in_transaction(db, [&] {
      sqlite3* handle = db;
      Status a = m.apply(handle);
      return a.ok() ? record_version(db, m.version) : a;
    });
    if (!s.ok()) {
      return Status::error(path + ": schema migration to version " + std::to_string(m.version) + " (" + m.change +
                           ") failed: " + s.message());
    }
  }
  // Columns the lists gained since (a statistic, a field): added to the tables there are.
  return in_transaction(db, [&] {
    Status s = add_missing(db, "records", record_columns());
    if (s.ok()) s = add_missing(db, "gemm_outputs", gemm_output_columns());
    if (s.ok()) s = add_missing(db, "scalars", scalar_columns());
    return s;
  });
}

}  // namespace fp8scope::history
