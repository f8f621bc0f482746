// Where a --history argument points: which backend, and its path or URL.
#pragma once

#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

struct HistoryLocation {
  enum class Kind { kSqlite, kPostgres } kind = Kind::kSqlite;
  std::string target;  // the SQLite file, or the PostgreSQL URL
};

// A PostgreSQL URL, sqlite:///file, a file path ending in .sqlite or .db, or else a directory whose
// history.sqlite is meant. Any other scheme:// is an error that says what is accepted.
Result<HistoryLocation> parse_history_location(const std::string& location);

}  // namespace fp8scope::history
