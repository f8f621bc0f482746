// The SQLite file's schema over time: a new file gets the tables the column lists describe; an
// older one is brought up through the recorded migrations, then gains the columns it lacks.
#pragma once

#include <sqlite3.h>

#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

int sqlite_schema_version(sqlite3* db);
// The error for a file a newer fp8scope wrote, or for one that is no fp8scope history.
Status check_sqlite_readable(sqlite3* db, const std::string& path);
// Creates or upgrades the schema of a file opened for writing.
Status migrate_sqlite(sqlite3* db, const std::string& path);

}  // namespace fp8scope::history
