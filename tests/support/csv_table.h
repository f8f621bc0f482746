// A strict RFC 4180 reader for the CSV fp8scope writes (`history --csv`): quoted fields may hold
// commas, quotes (doubled) and line breaks; a quote inside an unquoted field, text after a closing
// quote, an unterminated quote or a row whose field count differs from the header's fails the test.
#pragma once

#include <catch2/catch.hpp>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace fp8scope::testing {

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;

  // The column's index; fails the test for a name the header lacks.
  std::size_t column(const std::string& name) const {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return i;
    }
    FAIL("no CSV column " << name);
    return 0;
  }
  const std::string& at(std::size_t row, const std::string& name) const { return rows.at(row)[column(name)]; }
};

inline CsvTable parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  std::size_t i = 0;
  const auto end_field = [&] { record.push_back(std::move(field)), field.clear(); };
  while (i < text.size()) {
    if (text[i] == '"') {  // a quoted field
      for (++i;; ++i) {
        if (i >= text.size()) FAIL("CSV: unterminated quoted field at byte " << i);
        if (text[i] == '"' && i + 1 < text.size() && text[i + 1] == '"') {
          field += '"', ++i;
        } else if (text[i] == '"') {
          ++i;
          break;
        } else {
          field += text[i];
        }
      }
      if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
        FAIL("CSV: text after a closing quote at byte " << i);
      }
    } else {
      for (; i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r'; ++i) {
        if (text[i] == '"') FAIL("CSV: a quote inside an unquoted field at byte " << i);
        field += text[i];
      }
    }
    end_field();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == '\r') ++i;
    if (i < text.size() && text[i] == '\n') ++i;
    records.push_back(std::move(record)), record.clear();
  }
  CsvTable t;
  if (records.empty()) return t;
  t.header = records.front();
  for (std::size_t r = 1; r < records.size(); ++r) {
    INFO("CSV row " << r);
    REQUIRE(records[r].size() == t.header.size());
    t.rows.push_back(std::move(records[r]));
  }
  return t;
}

}  // namespace fp8scope::testing
