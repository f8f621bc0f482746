#include "postgres_connection.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "postgres_backend.h"
#include "url_redaction.h"

namespace fp8scope::history {

double PgResult::real(int row, int col) const {
  if (null(row, col)) return std::nan("");
  const char* v = PQgetvalue(r_, row, col);
  double d = 0;
  if (std::from_chars(v, v + PQgetlength(r_, row, col), d).ec != std::errc()) d = std::strtod(v, nullptr);  // Infinity
  return d;
}

std::int64_t PgResult::integer(int row, int col) const {
  std::int64_t i = 0;
  const char* v = PQgetvalue(r_, row, col);
  std::from_chars(v, v + PQgetlength(r_, row, col), i);
  return i;
}

std::vector<std::uint64_t> PgResult::counts(int row, int col) const {
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

void CopyRows::sep() {
  if (!first_) buf_ += '\t';
  first_ = false;
}

void CopyRows::text(const std::string& s) {
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

void CopyRows::null() {
  sep();
  buf_ += "\\N";
}

void CopyRows::integer(std::int64_t v) {
  sep();
  char b[24];
  buf_.append(b, std::to_chars(b, b + sizeof b, v).ptr);
}

void CopyRows::real(double v) {
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

void CopyRows::counts(const std::vector<std::uint64_t>& v) {
  sep();
  buf_ += '{';
  char b[24];
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) buf_ += ',';
    buf_.append(b, std::to_chars(b, b + sizeof b, v[i]).ptr);
  }
  buf_ += '}';
}

void CopyRows::end_row() {
  buf_ += '\n';
  first_ = true;
}

const char* postgres_type(SqlType t) {
  switch (t) {
    case SqlType::kReal: return "DOUBLE PRECISION";
    case SqlType::kInteger: return "BIGINT";
    case SqlType::kText: return "TEXT";
    case SqlType::kCounts: return "BIGINT[]";
  }
  return "TEXT";
}

std::string trim_message(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Result<PGconn*> connect_postgres(const std::string& url, const std::string& location) {
  // The URL's own settings win over these defaults (libpq expands dbname last).
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "fp8scope", url.c_str(), nullptr};
  PGconn* db = PQconnectdbParams(keys, values, 1);
  if (db == nullptr) return Status::error(location + ": out of memory");
  if (PQstatus(db) != CONNECTION_OK) {
    // libpq's message may repeat the URL (a bad %-escape, say): no copy of its password stays.
    Status s = Status::error("cannot connect to PostgreSQL at " + location + ": " +
                             redact_message(trim_message(PQerrorMessage(db)), url));
    PQfinish(db);
    return s;
  }
  PgResult quiet(PQexec(db, "SET client_min_messages = warning"));
  return db;
}

}  // namespace fp8scope::history
