#include "daemon_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace fp8scope::testing {

DaemonProcess::DaemonProcess(const std::string& data_dir, std::vector<std::string> extra_args, const std::string& listen) {
  std::filesystem::create_directories(data_dir);
  ready_file_ = data_dir + "/ready.json";
  log_ = data_dir + "/fp8scoped.log";
  std::filesystem::remove(ready_file_);
  std::vector<std::string> argv = {FP8SCOPE_DAEMON,   "--listen",     listen,        "--metrics",
                                   "127.0.0.1:0",     "--data-dir",   data_dir,      "--ready-file",
                                   ready_file_,       "--log-level",  "debug"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  child_ = std::make_unique<ChildProcess>(argv, std::vector<std::string>{}, log_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(ready_file_)) {
    if (!child_->running()) FAIL("fp8scoped exited during start-up:\n" << log());
    if (std::chrono::steady_clock::now() > deadline) FAIL("fp8scoped not ready after 30 s:\n" << log());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(ready_file_);
  const nlohmann::json ready = nlohmann::json::parse(in);
  grpc_ = ready["grpc"];
  metrics_ = ready["metrics"];
}

DaemonProcess::~DaemonProcess() {
  if (child_ && child_->running()) stop(SIGTERM, 30.0);
}

std::string DaemonProcess::log() const {
  std::ifstream in(log_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int DaemonProcess::stop(int signal_number, double timeout_seconds) {
  const int status = child_->stop(signal_number, timeout_seconds);
  if (status == -1000) child_->stop(SIGKILL, 10.0);
  return status;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string http_get(const std::string& host_port, const std::string& path) {
  const auto colon = host_port.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(host_port.substr(colon + 1))));
  inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host_port + "\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) response.append(buf, static_cast<std::size_t>(n));
  close(fd);
  const auto body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

std::vector<std::string> nonzero_series(const std::string& exposition, const std::string& name) {
  std::vector<std::string> lines;
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) == 0 && line.substr(line.rfind(' ') + 1) != "0") lines.push_back(line);
  }
  return lines;
}

double metric_value(const std::string& text, const std::string& name, const std::map<std::string, std::string>& labels) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind(name, 0) != 0) continue;
    const std::size_t after = name.size();
    if (after < line.size() && line[after] != '{' && line[after] != ' ') continue;
    std::map<std::string, std::string> got;
    std::size_t pos = after;
    if (line[pos] == '{') {
      const std::size_t end = line.find('}', pos);
      std::string inner = line.substr(pos + 1, end - pos - 1);
      std::size_t p = 0;
      while (p < inner.size()) {
        const std::size_t eq = inner.find('=', p);
        const std::size_t q2 = inner.find('"', eq + 2);
        got[inner.substr(p, eq - p)] = inner.substr(eq + 2, q2 - eq - 2);
        p = q2 + 2;
      }
      pos = end + 1;
    }
    if (got != labels) continue;
    return std::stod(line.substr(pos + 1));
  }
  return std::nan("");
}

ProcessResult cli(std::vector<std::string> args, double timeout_seconds) {
  args.insert(args.begin(), FP8SCOPE_CLI);
  return run_process(args, {}, timeout_seconds);
}

void wait_for_records_stored(const DaemonProcess& d, std::uint64_t records) {
  std::string last;
  const bool stored = eventually([&] {
    const ProcessResult s = cli({"status", "--endpoint", d.grpc(), "--json"});
    if (s.exit_code != 0) return false;
    last = nlohmann::json::parse(s.out).value("records_stored", std::string("0"));
    return last == std::to_string(records);
  });
  INFO("records stored: " << last << ", expected " << records);
  REQUIRE(stored);
}

}  // namespace fp8scope::testing
