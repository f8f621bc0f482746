// A real Prometheus server (Debian's package) scrapes fp8scoped, and PromQL returns the values the
// daemon computed for a pushed tensor.
#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/daemon_fixture.h"
#include "support/temp_dir.h"

using namespace fp8scope::testing;

namespace {

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("Prometheus scrapes the daemon and PromQL returns the pushed values", "[prometheus]") {
  const char* prometheus = "/usr/bin/prometheus";
  REQUIRE(std::filesystem::exists(prometheus));  // scripts/setup.sh installs Debian's package
  TempDir dir;
  DaemonProcess daemon(dir.file("data"));
  std::string data;
  for (int i = 0; i < 256; ++i) data += le_bytes(std::sin(0.1f * static_cast<float>(i)) * (i % 64 == 3 ? 300.0f : 1.0f));
  const std::string file = dir.write("t.npy", npy_file("<f4", false, "(4, 64)", data));
  REQUIRE(cli({"push", file, "--endpoint", daemon.grpc(), "--layer", "blocks.3.mlp.fc2", "--operand", "w", "--gemm",
               "fprop", "--job", "promtest", "--step", "7"})
              .exit_code == 0);

  // honor_labels keeps the daemon's own job label (the training job) instead of the scrape job's.
  const int port = free_port();
  const std::string config = dir.write("prometheus.yml", "global:\n  scrape_interval: 1s\nscrape_configs:\n"
                                                         "  - job_name: fp8scoped\n    honor_labels: true\n    static_configs:\n"
                                                         "      - targets: ['" + daemon.metrics() + "']\n");
  ChildProcess server({prometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir.file("tsdb"),
                       "--web.listen-address=127.0.0.1:" + std::to_string(port)},
                      {}, dir.file("prometheus.log"));
  const std::string labels = "{job=\"promtest\",layer=\"blocks.3.mlp.fc2\",operand=\"w\",recipe=\"tensor_current\"}";
  nlohmann::json result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string body =
        http_get("127.0.0.1:" + std::to_string(port), "/api/v1/query?query=" + url_encode("fp8scope_mse" + labels));
    if (!body.empty()) {
      auto j = nlohmann::json::parse(body, nullptr, false);
      if (!j.is_discarded() && j["status"] == "success" && !j["data"]["result"].empty()) {
        result = j;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  REQUIRE(!result.is_null());
  const double promql = std::stod(result["data"]["result"][0]["value"][1].get<std::string>());
  const double exposed = metric_value(http_get(daemon.metrics(), "/metrics"), "fp8scope_mse",
                                      {{"job", "promtest"}, {"layer", "blocks.3.mlp.fc2"}, {"gemm", "fprop"},
                                       {"operand", "w"}, {"format", "e4m3"}, {"recipe", "tensor_current"}});
  CHECK(promql == Approx(exposed).epsilon(1e-12));
  CHECK(result["data"]["result"][0]["metric"]["gemm"] == "fprop");
  CHECK(server.stop(SIGTERM, 30) == 0);
}
