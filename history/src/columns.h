// The history's schema, declared once: one column list per table, each column with its name, its
// SQL type, when it is NULL, and how a record's field goes into a row and comes back out. Both
// backends build their CREATE, INSERT/COPY and SELECT statements from these lists, and add a
// column a store lacks, so a new field is one row here (plus its tests).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp8scope/history/records.h"

namespace fp8scope::history {

enum class SqlType : std::uint8_t { kReal, kInteger, kText, kCounts };  // counts: a list of uint64

// Where a row's values go, in column order (a prepared statement's parameters, COPY text).
class FieldSink {
 public:
  virtual ~FieldSink() = default;
  virtual void real(double v) = 0;
  virtual void integer(std::int64_t v) = 0;
  virtual void text(const std::string& v) = 0;
  virtual void counts(const std::vector<std::uint64_t>& v) = 0;
  virtual void null() = 0;
};

// A row read back, one column at a time, in column order.
class FieldSource {
 public:
  virtual ~FieldSource() = default;
  virtual bool null() const = 0;  // of the current column
  virtual double real() const = 0;  // NaN when NULL
  virtual std::int64_t integer() const = 0;
  virtual std::string text() const = 0;  // "" when NULL
  virtual std::vector<std::uint64_t> counts() const = 0;
  virtual void next() = 0;  // on to the next column
};

template <class Record>
struct Column {
  std::string name;
  SqlType type;
  bool not_null;
  std::function<void(const Record&, FieldSink&)> put;
  // False: a row this build cannot read as a record (skipped).
  std::function<bool(const FieldSource&, Record&)> get;
};

// Records: the key (time, job, run, host, rank, step), then the rest, one stat_<key> column per
// statistic of the statistics table last. The id is the backends' own (a row's place).
const std::vector<Column<HistoryRecord>>& record_columns();
const std::vector<Column<GemmOutputRecord>>& gemm_output_columns();
const std::vector<Column<ScalarRecord>>& scalar_columns();

// "a, b, c": the names, for statement text.
template <class Record>
std::string column_names(const std::vector<Column<Record>>& columns) {
  std::string names;
  for (const Column<Record>& c : columns) names += (names.empty() ? "" : ", ") + c.name;
  return names;
}

template <class Record>
void put_row(const std::vector<Column<Record>>& columns, const Record& r, FieldSink& sink) {
  for (const Column<Record>& c : columns) c.put(r, sink);
}

// False when a column refused the row.
template <class Record>
bool get_row(const std::vector<Column<Record>>& columns, FieldSource& source, Record& r) {
  bool ok = true;
  for (const Column<Record>& c : columns) {
    ok = c.get(source, r) && ok;
    source.next();
  }
  return ok;
}

// A table's CREATE statement: its id column first (the backend's declaration; "" for none), then
// every column with the backend's type for it.
template <class Record>
std::string create_table(const std::string& table, const std::string& id_column,
                         const std::vector<Column<Record>>& columns, const char* (*type)(SqlType)) {
  std::string sql = "CREATE TABLE IF NOT EXISTS " + table + " (" + id_column;
  for (const Column<Record>& c : columns) {
    sql += (sql.back() == '(' ? "" : ", ") + c.name + " " + type(c.type) + (c.not_null ? " NOT NULL" : "");
  }
  return sql + ")";
}

// The statements that add the columns a table of an older schema lacks (`has` says which it has).
// Added columns take NULL in the rows already there, which each column reads as its empty value.
template <class Record, class Has>
std::vector<std::string> add_missing_columns(const std::string& table, const std::vector<Column<Record>>& columns,
                                             Has has, const char* (*type)(SqlType)) {
  std::vector<std::string> sql;
  for (const Column<Record>& c : columns) {
    if (!has(c.name)) sql.push_back("ALTER TABLE " + table + " ADD COLUMN " + c.name + " " + type(c.type));
  }
  return sql;
}

}  // namespace fp8scope::history
