// SQLite plumbing the backend's jobs share: opening a file (with REGEXP through fp8scope's
// linear-time layer patterns), statements that finalize themselves, and rows bound and read
// through the history's column lists (columns.h).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include "columns.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

Status sql_error(sqlite3* db, const std::string& what);
Status exec(sqlite3* db, const std::string& sql);
Result<sqlite3*> open_db(const std::string& path, bool read_only);
bool has_table(sqlite3* db, const char* table);
bool has_column(sqlite3* db, const char* table, const std::string& column);

// One prepared statement, finalized however the function returns.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql);
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return ok_; }
  sqlite3_stmt* get() const { return s_; }
  void text(int i, const std::string& t) { sqlite3_bind_text(s_, i, t.c_str(), -1, SQLITE_TRANSIENT); }
  void integer(int i, std::int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void real(int i, double v) { sqlite3_bind_double(s_, i, v); }

 private:
  sqlite3_stmt* s_ = nullptr;
  bool ok_ = false;
};

// A row's values bound to a statement's parameters, from `first` on.
class BoundRow final : public FieldSink {
 public:
  BoundRow(Statement& q, int first) : q_(q), i_(first) {}
  void real(double v) override { sqlite3_bind_double(q_.get(), i_++, v); }
  void integer(std::int64_t v) override { sqlite3_bind_int64(q_.get(), i_++, v); }
  void text(const std::string& v) override { q_.text(i_++, v); }
  void counts(const std::vector<std::uint64_t>& v) override;  // a blob of native uint64s
  void null() override { sqlite3_bind_null(q_.get(), i_++); }

 private:
  Statement& q_;
  int i_;
};

// The current row of a statement, read column by column from `first` on.
class ReadRow final : public FieldSource {
 public:
  ReadRow(const Statement& q, int first) : q_(q), col_(first) {}
  bool null() const override { return sqlite3_column_type(q_.get(), col_) == SQLITE_NULL; }
  double real() const override;
  std::int64_t integer() const override { return sqlite3_column_int64(q_.get(), col_); }
  std::string text() const override;
  std::vector<std::uint64_t> counts() const override;
  void next() override { ++col_; }

 private:
  const Statement& q_;
  int col_;
};

// SQLite's column type for the history's.
const char* sqlite_type(SqlType t);

}  // namespace fp8scope::history
