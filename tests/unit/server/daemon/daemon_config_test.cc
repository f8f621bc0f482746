// Flags, FP8SCOPE_* variables and the config file, and the rules that keep the daemon loopback
// unless remote access is protected or explicitly accepted.
#include "fp8scope/daemon/daemon_config.h"

#include <catch2/catch.hpp>
#include <cstdlib>

#include "support/temp_dir.h"

using namespace fp8scope::server;

using fp8scope::Result;

namespace {
Result<ParsedConfig> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "fp8scoped");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_daemon_config(static_cast<int>(argv.size()), argv.data());
}
}  // namespace

TEST_CASE("defaults bind loopback only", "[daemon_config]") {
  auto c = parse({});
  REQUIRE(c.ok());
  CHECK(is_loopback_address(c.value().config.listen));
  CHECK(is_loopback_address(c.value().config.metrics));
  CHECK(validate(c.value().config).ok());
}

TEST_CASE("flags beat the config file, which beats FP8SCOPE_* variables", "[daemon_config]") {
  fp8scope::testing::TempDir dir;
  const std::string file = dir.write("fp8scoped.toml", "data-dir = \"from-file\"\nmax-series = 7\nbackend = \"cpu\"\n");
  setenv("FP8SCOPE_MAX_SERIES", "9", 1);
  setenv("FP8SCOPE_ANALYSIS_WORKERS", "3", 1);
  auto c = parse({"--config", file, "--backend", "auto"});
  unsetenv("FP8SCOPE_MAX_SERIES");
  unsetenv("FP8SCOPE_ANALYSIS_WORKERS");
  REQUIRE(c.ok());
  CHECK(c.value().config.data_dir == "from-file");
  CHECK(c.value().config.max_series == 7);
  CHECK(c.value().config.analysis_workers == 3);
  CHECK(c.value().config.backend == "auto");
}

TEST_CASE("listening beyond loopback needs TLS, a token, or --insecure", "[daemon_config]") {
  DaemonConfig c;
  c.listen = "0.0.0.0:7767";
  CHECK(validate(c).message().find("refusing to listen on 0.0.0.0:7767 without TLS or a token") == 0);
  c.insecure = true;
  CHECK(validate(c).ok());
  c.insecure = false;
  c.token_file = "/etc/fp8scope/token";
  CHECK(validate(c).ok());
  CHECK(is_loopback_address("unix:///run/fp8scope.sock"));
  CHECK(is_loopback_address("[::1]:7767"));
  CHECK(!is_loopback_address("10.0.0.3:7767"));
  // Names are resolved later, to anything: only literal loopback addresses count.
  CHECK(!is_loopback_address("127.attacker.example:0"));
  CHECK(!is_loopback_address("127.0.0.1.nip.io:7767"));
  CHECK(is_loopback_address("127.0.0.2:7767"));
  CHECK(is_loopback_address("localhost:7767"));
  CHECK(!is_loopback_address("[::ffff:10.0.0.3]:7767"));
}

TEST_CASE("nonsense is refused with what was expected", "[daemon_config]") {
  CHECK(!parse({"--max-series", "many"}).ok());
  DaemonConfig c;
  c.backend = "tpu";
  CHECK(validate(c).message() == "--backend: expected auto, cpu or cuda, got tpu");
  c = DaemonConfig();
  c.queue_budget_bytes = 10;
  CHECK(!validate(c).ok());
  c = DaemonConfig();
  c.tls_cert = "cert.pem";
  CHECK(validate(c).message() == "--tls-cert and --tls-key go together");
}
