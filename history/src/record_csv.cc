#include "fp8scope/history/record_csv.h"

#include <cstdio>

#include "columns.h"

namespace fp8scope::history {
namespace {

// RFC 4180, 2.6-2.7: a field with a delimiter, a quote or a line break is quoted, quotes doubled.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string quoted = "\"";
  for (char c : v) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

class CsvRow final : public FieldSink {
 public:
  void real(double v) override {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    field(text);
  }
  void integer(std::int64_t v) override { field(std::to_string(v)); }
  void text(const std::string& v) override { field(csv_field(v)); }
  void counts(const std::vector<std::uint64_t>& v) override {
    std::string joined;
    for (std::size_t k = 0; k < v.size(); ++k) joined += (k ? ";" : "") + std::to_string(v[k]);
    field(joined);
  }
  void null() override { field(""); }
  std::string line() const { return row_ + "\n"; }

 private:
  void field(const std::string& v) {
    row_ += (first_ ? "" : ",") + v;
    first_ = false;
  }
  std::string row_;
  bool first_ = true;
};

}  // namespace

std::string record_csv_header() {
  CsvRow header;
  for (const Column<HistoryRecord>& c : record_columns()) header.text(c.name);
  return header.line();
}

std::string record_csv_row(const HistoryRecord& r) {
  CsvRow row;
  put_row(record_columns(), r, row);
  return row.line();
}

}  // namespace fp8scope::history
