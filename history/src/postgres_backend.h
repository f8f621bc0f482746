// The shared history: one PostgreSQL database every node's daemon of a job writes (host, rank and
// run in every key; each daemon's journal bookkeeping under its own writer name).
#pragma once

#include <memory>
#include <string>

#include "backend.h"

namespace fp8scope::history {

// `url`: a libpq connection URI (postgresql://user[:password]@host[:port]/db[?param=value]).
// `writer`: this daemon among those sharing the database ("" opens for reading only).
Result<std::unique_ptr<Backend>> open_postgres_backend(const std::string& url, const std::string& writer);

}  // namespace fp8scope::history
