// The history's records on the wire (the Admin API's history RPCs) and back: one conversion each
// way, shared by the daemon's Admin service and the CLI's remote reader, so a field the records
// gain is carried by both or by neither (history_rows_test round-trips every field).
#pragma once

#include <optional>

#include "fp8scope/history/records.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::wire {

void record_to_wire(const history::HistoryRecord& record, v1::HistoryRow& row);
// Nothing for a row naming a recipe, element type, format or layout this build does not know (a
// newer daemon's): the reader skips it, as the stores skip such rows.
std::optional<history::HistoryRecord> record_from_wire(const v1::HistoryRow& row);

void scalar_to_wire(const history::ScalarRecord& scalar, v1::ScalarRow& row);
history::ScalarRecord scalar_from_wire(const v1::ScalarRow& row);

void gemm_output_to_wire(const history::GemmOutputRecord& output, v1::GemmOutputRow& row);
history::GemmOutputRecord gemm_output_from_wire(const v1::GemmOutputRow& row);

// A filter as a query, and back (limit as given: the daemon caps it).
v1::HistoryQuery filter_to_wire(const history::HistoryFilter& filter);
// An error for a recipe name no recipe (nor "observed") has.
Result<history::HistoryFilter> filter_from_wire(const v1::HistoryQuery& query);

}  // namespace fp8scope::wire
