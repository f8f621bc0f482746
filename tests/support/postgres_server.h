// A real PostgreSQL server for tests: initdb into a temporary directory (as the `postgres` user
// when the tests run as root, which PostgreSQL refuses to be), listening on loopback at a free port,
// trust authentication for a superuser named fp8scope; stopped by its PID when destroyed.
#pragma once

#include <memory>
#include <string>

#include "process.h"
#include "temp_dir.h"

namespace fp8scope::testing {

class PostgresServer {
 public:
  // Throws std::runtime_error with the reason when no server can be started (a test then fails
  // with it): PostgreSQL is part of what CI installs (scripts/setup.sh), so a missing one is an
  // error, not a skip. The benchmarks use it too.
  PostgresServer();
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const { return port_; }
  // A connection URL for `database`, as `user`.
  std::string url(const std::string& database = "postgres", const std::string& user = "fp8scope") const;
  // A new empty database (fp8scope_1, fp8scope_2, ...), and its URL.
  std::string create_database();
  // psql -c `sql` (or -f a file) against `database` as `user`: its output; throws when it fails.
  std::string sql(const std::string& database, const std::string& sql, const std::string& user = "fp8scope") const;
  std::string sql_file(const std::string& database, const std::string& path) const;

  // The server stopped (a database gone mid-run) and started again on the same port and data.
  void stop();
  void start();

 private:
  std::string bin(const std::string& tool) const;
  std::vector<std::string> as_owner(std::vector<std::string> argv) const;

  TempDir dir_;
  std::string bin_dir_, data_;
  int port_ = 0;
  int databases_ = 0;
  std::unique_ptr<ChildProcess> server_;
};

}  // namespace fp8scope::testing
