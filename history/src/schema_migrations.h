// Versioned schemas: each backend lists its migrations in order, the database records the version
// it is at, and a store opened by an older fp8scope than the one that last migrated it is refused
// rather than misread.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

template <typename Db>
struct Migration {
  int version;         // 1, 2, ...: what the database is at after it
  const char* change;  // what it does, for the log
  std::function<Status(Db&)> apply;
};

// The error for a database a newer fp8scope migrated; empty when `at` is one this build knows.
inline Status check_schema_version(int at, int latest, const std::string& location) {
  if (at <= latest) return Status();
  return Status::error(location + ": its history schema is version " + std::to_string(at) + ", newer than this " +
                       "fp8scope knows (" + std::to_string(latest) + "); a newer fp8scope wrote it. Upgrade " +
                       "fp8scope, or give this daemon a history of its own");
}

}  // namespace fp8scope::history
