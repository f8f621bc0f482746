// The history's records cross the Admin API whole: every field of every record type, filled from
// the schema's column lists, comes back equal, and so does a filter.
#include "fp8scope/wire/history_rows.h"

#include <catch2/catch.hpp>

#include "support/filled_records.h"

using namespace fp8scope;
using fp8scope::testing::filled;

TEST_CASE("a history record round-trips through the wire with every field", "[history_rows]") {
  history::HistoryRecord r = filled(history::record_columns());
  r.id = 4242;
  REQUIRE(!r.histogram.empty());
  REQUIRE(!r.scale_histogram.empty());
  v1::HistoryRow row;
  wire::record_to_wire(r, row);
  CHECK(wire::record_from_wire(row) == std::optional(r));
  // Through the bytes too, as the RPC carries it.
  v1::HistoryRow parsed;
  REQUIRE(parsed.ParseFromString(row.SerializeAsString()));
  CHECK(wire::record_from_wire(parsed) == std::optional(r));
  // A row naming a recipe this build does not know (a newer daemon's) is skipped, not misread.
  row.set_recipe("nvfp8_future");
  CHECK_FALSE(wire::record_from_wire(row));
}

TEST_CASE("scalars and GEMM checks round-trip through the wire", "[history_rows]") {
  const history::ScalarRecord s = filled(history::scalar_columns());
  v1::ScalarRow srow;
  wire::scalar_to_wire(s, srow);
  CHECK(wire::scalar_from_wire(srow) == s);
  const history::GemmOutputRecord g = filled(history::gemm_output_columns());
  v1::GemmOutputRow grow;
  wire::gemm_output_to_wire(g, grow);
  CHECK(wire::gemm_output_from_wire(grow) == g);
}

TEST_CASE("a history filter round-trips through the wire", "[history_rows]") {
  history::HistoryFilter f;
  f.job = "j";
  f.run = "r";
  f.layer_regex = "blocks\\.1\\.";
  f.caster = Caster::recipe(RecipeKind::kMxfp8);
  f.gemm = GemmRole::kDgrad;
  f.operand = Operand::kW;
  f.min_step = 3;
  f.max_step = 9;
  f.limit = 17;
  f.after_id = 99;
  const Result<history::HistoryFilter> read = wire::filter_from_wire(wire::filter_to_wire(f));
  REQUIRE(read.ok());
  const history::HistoryFilter& back = read.value();
  CHECK(back.job == f.job);
  CHECK(back.run == f.run);
  CHECK(back.layer_regex == f.layer_regex);
  CHECK(back.caster == f.caster);
  CHECK(back.gemm == f.gemm);
  CHECK(back.operand == f.operand);
  CHECK(back.min_step == 3);
  CHECK(back.max_step == 9);
  CHECK(back.limit == 17);
  CHECK(back.after_id == 99);
  v1::HistoryQuery unknown;
  unknown.set_recipe("fp9");
  CHECK_THAT(wire::filter_from_wire(unknown).message(), Catch::Contains("got 'fp9'"));
}
