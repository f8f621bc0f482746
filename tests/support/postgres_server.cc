#include "postgres_server.h"

#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <thread>

namespace fp8scope::testing {
namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// The newest /usr/lib/postgresql/<version>/bin holding initdb (Debian's layout).
std::string find_bin_dir() {
  std::string best;
  int best_version = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    const int version = std::atoi(entry.path().filename().c_str());
    if (version > best_version && std::filesystem::exists(entry.path() / "bin/initdb")) {
      best_version = version;
      best = (entry.path() / "bin").string();
    }
  }
  return best;
}

// Also said on stderr: Catch2 built with CATCH_CONFIG_FAST_COMPILE does not print what() of an
// exception that fails a test.
void require(bool ok, const std::string& what) {
  if (ok) return;
  std::cerr << "PostgreSQL for tests: " << what << std::endl;
  throw std::runtime_error("PostgreSQL for tests: " + what);
}

}  // namespace

std::vector<std::string> PostgresServer::as_owner(std::vector<std::string> argv) const {
  if (::geteuid() != 0) return argv;
  std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::string PostgresServer::bin(const std::string& tool) const { return bin_dir_ + "/" + tool; }

PostgresServer::PostgresServer() {
  bin_dir_ = find_bin_dir();
  require(!bin_dir_.empty(), "no /usr/lib/postgresql/*/bin/initdb (Debian's postgresql package; scripts/setup.sh "
                             "installs it)");
  data_ = dir_.file("data");
  std::filesystem::create_directories(data_);
  if (::geteuid() == 0) {
    const passwd* pg = ::getpwnam("postgres");
    require(pg != nullptr, "running as root and there is no postgres user to run the server as");
    for (const std::string& p : {dir_.path(), data_}) {
      require(::chown(p.c_str(), pg->pw_uid, pg->pw_gid) == 0, "cannot chown " + p + " to postgres");
    }
  }
  const ProcessResult init = run_process(
      as_owner({bin("initdb"), "-D", data_, "-U", "fp8scope", "--auth=trust", "--no-sync", "-E", "UTF8"}), {"LC_ALL=C"}, 120);
  require(init.exit_code == 0, "initdb failed: " + init.out + init.err);
  port_ = free_port();
  start();
}

PostgresServer::~PostgresServer() { stop(); }

void PostgresServer::start() {
  server_ = std::make_unique<ChildProcess>(
      as_owner({bin("postgres"), "-D", data_, "-p", std::to_string(port_), "-h", "127.0.0.1", "-k", dir_.path(),
                "-c", "fsync=off", "-c", "max_connections=100"}),
      std::vector<std::string>{"LC_ALL=C"}, dir_.file("postgres.log"));
  for (int i = 0; i < 300; ++i) {
    const ProcessResult ready = run_process({bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", std::to_string(port_)}, {}, 10);
    if (ready.exit_code == 0) return;
    require(server_->running(), "the server exited at start; see " + dir_.file("postgres.log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  require(false, "no connections accepted within 30 s; see " + dir_.file("postgres.log"));
}

void PostgresServer::stop() {
  if (server_) server_->stop(SIGINT, 30);  // "fast" shutdown: clients are disconnected at once
  server_.reset();
}

std::string PostgresServer::url(const std::string& database, const std::string& user) const {
  return "postgresql://" + user + "@127.0.0.1:" + std::to_string(port_) + "/" + database;
}

std::string PostgresServer::create_database() {
  const std::string name = "fp8scope_" + std::to_string(++databases_);
  sql("postgres", "CREATE DATABASE " + name);
  return url(name);
}

std::string PostgresServer::sql(const std::string& database, const std::string& statement, const std::string& user) const {
  const ProcessResult r = run_process({bin("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url(database, user),
                                       "-c", statement}, {}, 60);
  require(r.exit_code == 0, statement + ": " + r.err);
  return r.out;
}

std::string PostgresServer::sql_file(const std::string& database, const std::string& path) const {
  const ProcessResult r =
      run_process({bin("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url(database), "-f", path}, {}, 60);
  require(r.exit_code == 0, path + ": " + r.err);
  return r.out;
}

}  // namespace fp8scope::testing
