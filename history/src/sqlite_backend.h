// The embedded history: one SQLite file (WAL) a daemon writes and the CLI reads beside it.
#pragma once

#include <memory>
#include <string>

#include "backend.h"

namespace fp8scope::history {

// Opens (creating and migrating when writable) the SQLite history at `path`.
Result<std::unique_ptr<Backend>> open_sqlite_backend(const std::string& path, bool read_only);

}  // namespace fp8scope::history
