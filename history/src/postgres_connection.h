// PostgreSQL plumbing the backend's jobs share: results that clear themselves, COPY rows and
// result rows through the history's column lists (columns.h), connecting, and redacting URLs.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "columns.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

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
  double real(int row, int col) const;  // NaN when NULL; Infinity as PostgreSQL spells it
  std::int64_t integer(int row, int col) const;
  std::vector<std::uint64_t> counts(int row, int col) const;  // a bigint[] in text form: {1,2,3}

 private:
  PGresult* r_;
};

// Row 0 of a single-row result, read column by column from `first` on.
class PgRow final : public FieldSource {
 public:
  PgRow(const PgResult& r, int first) : r_(r), col_(first) {}
  bool null() const override { return r_.null(0, col_); }
  double real() const override { return r_.real(0, col_); }
  std::int64_t integer() const override { return r_.integer(0, col_); }
  std::string text() const override { return null() ? std::string() : r_.text(0, col_); }
  std::vector<std::uint64_t> counts() const override { return r_.counts(0, col_); }
  void next() override { ++col_; }

 private:
  const PgResult& r_;
  int col_;
};

// COPY's text format: tab-separated, \N for NULL, backslash escapes.
class CopyRows final : public FieldSink {
 public:
  void real(double v) override;
  void integer(std::int64_t v) override;
  void text(const std::string& s) override;
  void counts(const std::vector<std::uint64_t>& v) override;
  void null() override;
  void end_row();
  const std::string& data() const { return buf_; }

 private:
  void sep();
  std::string buf_;
  bool first_ = true;
};

// PostgreSQL's column type for the history's.
const char* postgres_type(SqlType t);

std::string trim_message(std::string s);
Result<PGconn*> connect_postgres(const std::string& url, const std::string& location);

}  // namespace fp8scope::history
