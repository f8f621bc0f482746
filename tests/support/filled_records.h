// History records with every field set to a value of its own, made from the schema's column lists
// (history/src/columns.h): a field the lists gain is filled here too, so a round trip that drops
// it anywhere (a backend, the wire) fails its comparison.
#pragma once

#include <string>

#include "columns.h"

namespace fp8scope::testing {

// Distinct values for column `index`, valid for the columns whose text names something.
class DistinctValue final : public history::FieldSource {
 public:
  DistinctValue(const std::string& column, history::SqlType type, int index, int seed)
      : column_(column), type_(type), n_(index + 1000 * seed) {}
  bool null() const override { return false; }
  double real() const override { return n_ + 0.25; }
  std::int64_t integer() const override { return n_; }
  std::string text() const override {
    if (column_ == "gemm") return "wgrad";
    if (column_ == "operand") return "dy";
    if (column_ == "scale_layout") return "vec16_ue4m3";
    if (column_ == "dtype") return "e4m3";
    if (column_ == "recipe") return "nvfp4_sr";
    if (column_ == "format") return "e5m2";
    if (column_ == "value_units") return "relative";
    if (column_ == "block_dynamic_ranges") return "4x1:3.5:2;32x2:0:1.25";
    return column_ + "-" + std::to_string(n_) + "\t\\\n";  // COPY's escapes
  }
  std::vector<std::uint64_t> counts() const override { return {static_cast<std::uint64_t>(n_), 0, 7}; }
  void next() override {}

 private:
  std::string column_;
  history::SqlType type_;
  int n_;
};

template <class Record>
Record filled(const std::vector<history::Column<Record>>& columns, int seed = 1) {
  Record r;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    columns[i].get(DistinctValue(columns[i].name, columns[i].type, static_cast<int>(i), seed), r);
  }
  return r;
}

}  // namespace fp8scope::testing
