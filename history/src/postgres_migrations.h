// The PostgreSQL database's schema: everything in schema fp8scope, migrated once under an advisory
// lock however many daemons start together; tables as the column lists describe them, and the
// columns an older database lacks added.
#pragma once

#include <libpq-fe.h>

#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

Status migrate_postgres(PGconn* db, const std::string& location);
// The error for a database with no fp8scope history, or one a newer fp8scope migrated.
Status check_postgres_readable(PGconn* db, const std::string& location);

}  // namespace fp8scope::history
