// `fp8scope history --csv`: records as CSV rows of the history's own columns (history/src/
// columns.cc, the list the stores are built from), so the header and the rows cannot disagree and a
// new column reaches the CSV by itself. Fields are quoted per RFC 4180 (a field holding a comma, a
// quote or a line break is enclosed in quotes, its quotes doubled); rows end in LF, which every
// RFC 4180 reader accepts. NULL is an empty field; a list of counts is its values joined by ';'.
#pragma once

#include <string>

#include "fp8scope/history/records.h"

namespace fp8scope::history {

std::string record_csv_header();               // the column names, with the line end
std::string record_csv_row(const HistoryRecord& r);  // one row, with the line end

}  // namespace fp8scope::history
