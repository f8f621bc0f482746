// Ingest throughput: 16 MiB BF16 tensors pushed through the Stream RPC to an in-process fp8scoped,
// over loopback TCP against a raw TCP loopback copy of the same bytes (target >= 0.5 of raw;
// counter "x_raw_tcp"); and, for a shipper beside the daemon, against one single-threaded memcpy
// of the same bytes (counter "x_memcpy"): over a unix socket, with the payload in shared memory the
// daemon copies out of (target >= 0.8), and a bare unix socket pair (the bound of any socket
// transport), all in the same run. Then analysis latency under load: p50/p99 from the daemon's
// own fp8scope_analysis_seconds histogram while it analyzes a stream of samples.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <prometheus/text_serializer.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fp8scope/daemon/daemon.h"
#include "fp8scope/daemon/memory_tuning.h"
#include "fp8scope/export/health_metrics.h"
#include "fp8scope/ingest/ingest_queue.h"
#include "fp8scope/services/ingest_service.h"
#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/ingest/shared_regions.h"
#include "fp8scope/shm/ring_memory.h"
#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/wire/wire.h"
#include "median_reporter.h"

using namespace fp8scope;

namespace {

constexpr std::size_t kTensorBytes = 16u << 20;
double g_raw_seconds = 0.0;
double g_memcpy_seconds = 0.0;

const std::vector<std::uint8_t>& tensor() {
  static const std::vector<std::uint8_t> t = [] {
    std::vector<std::uint8_t> v(kTensorBytes);
    std::uint32_t s = 12345;
    for (std::size_t i = 0; i < v.size(); i += 2) {
      s = s * 1664525u + 1013904223u;
      const float f = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 8.0f;
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      v[i] = static_cast<std::uint8_t>(u >> 16);
      v[i + 1] = static_cast<std::uint8_t>(u >> 24);
    }
    return v;
  }();
  return t;
}

struct BenchDaemon {
  std::string dir = (std::filesystem::temp_directory_path() / ("fp8scope-bench-" + std::to_string(getpid()))).string();
  std::unique_ptr<server::Daemon> daemon;
  explicit BenchDaemon(int workers) {
    server::DaemonConfig c;
    c.listen = "127.0.0.1:0";
    c.metrics = "127.0.0.1:0";
    c.data_dir = dir;
    c.analysis_workers = workers;
    c.queue_budget_bytes = 8ull << 30;
    c.max_inflight_bytes = 256ull << 20;
    auto started = server::Daemon::start(c);
    if (!started.ok()) {
      std::fprintf(stderr, "ingest_bench: %s\n", started.message().c_str());
      std::exit(1);
    }
    daemon = std::move(started).value();
  }
  ~BenchDaemon() {
    daemon.reset();
    std::filesystem::remove_all(dir);
  }
};

v1::Hello hello() {
  v1::Hello h;
  h.set_protocol_version(wire::kProtocolVersion);
  h.set_job("bench");
  h.set_run("bench");
  return h;
}

v1::TensorHeader header(std::uint64_t step) {
  v1::TensorHeader h;
  h.set_step(step);
  h.set_layer("bench.layer");
  h.set_gemm(v1::GEMM_FPROP);
  h.set_operand(v1::OPERAND_X);
  h.set_dtype(v1::DTYPE_BF16);
  h.add_shape(2048);
  h.add_shape(static_cast<std::int64_t>(kTensorBytes / 2 / 2048));
  return h;
}

// The same-host baseline: one copy of the bytes by one thread.
void BM_Memcpy(benchmark::State& state) {
  const auto& t = tensor();
  std::vector<std::uint8_t> dst(t.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), t.data(), t.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.size()));
}

// The network baseline: the same bytes over a plain loopback TCP connection into a reader that discards them.
void BM_RawTcpLoopback(benchmark::State& state) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  listen(listener, 1);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread reader([listener] {
    const int fd = accept(listener, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    while (read(fd, buf.data(), buf.size()) > 0) {
    }
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const auto& t = tensor();
  for (auto _ : state) {
    std::size_t sent = 0;
    while (sent < t.size()) sent += static_cast<std::size_t>(write(fd, t.data() + sent, t.size() - sent));
  }
  close(fd);
  reader.join();
  close(listener);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.size()));
}

// What any socket costs beside one memcpy: the same bytes through a bare unix socket pair into a
// reader that discards them (a copy into the kernel and one out), no gRPC.
void BM_RawUnixSocket(benchmark::State& state) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    state.SkipWithError("socketpair failed");
    return;
  }
  std::thread reader([fd = fds[1]] {
    std::vector<char> buf(1 << 20);
    while (read(fd, buf.data(), buf.size()) > 0) {
    }
    close(fd);
  });
  const auto& t = tensor();
  for (auto _ : state) {
    std::size_t sent = 0;
    while (sent < t.size()) sent += static_cast<std::size_t>(write(fds[0], t.data() + sent, t.size() - sent));
  }
  close(fds[0]);
  reader.join();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.size()));
}

// The journal's folder.
std::string fresh_dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("fp8scope-ingest-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

// The daemon's real ingest path (gRPC server, IngestService, reassembly, budget, queue) with a
// consumer that releases samples instead of analyzing them, so the figure is the ingest path's own
// and not the CPU the analysis takes on the same two cores.
struct IngestOnly {
  std::string dir = fresh_dir();
  prometheus::Registry registry;
  server::ByteBudget budget{8ull << 30};
  server::IngestQueue queue{1};
  server::PolicyStore policy;
  server::HealthMetrics health{registry, "bench", "none", budget.capacity()};
  std::unique_ptr<server::AckJournal> journal = std::move(server::AckJournal::open(dir + "/accepted.journal")).value();
  server::AccessCheck access{""};
  std::unique_ptr<server::SharedRegions> regions;
  std::unique_ptr<server::IngestService> service;
  std::unique_ptr<grpc::Server> server;
  std::thread consumer;
  std::string address;
  IngestOnly(bool unix_socket, bool shared_memory) {
    if (shared_memory) regions = std::move(server::SharedRegions::open(dir + ".shm")).value();
    service = std::make_unique<server::IngestService>(
        server::IngestDeps{&policy, &budget, &queue, &health, journal.get(), &access,
                           server::AssemblerLimits{1ull << 30, wire::kDaemonChunkBytes}, 256ull << 20, "bench",
                           std::chrono::seconds(30), regions.get()});
    grpc::ServerBuilder b;
    int port = 0;
    address = unix_socket ? "unix://" + dir + ".sock" : "127.0.0.1:0";
    b.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service.get());
    b.SetMaxReceiveMessageSize(static_cast<int>(wire::kDaemonChunkBytes + (64 << 10)));
    b.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);  // as fp8scoped does
    b.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, static_cast<int>(wire::kDaemonChunkBytes));
    server = b.BuildAndStart();
    if (!unix_socket) address = "127.0.0.1:" + std::to_string(port);
    consumer = std::thread([this] {
      while (auto item = queue.pop(0)) {
        if (server::Sample* s = std::get_if<server::Sample>(&*item)) {
          s->lease.reset();
          if (s->journal) journal->release(*s->journal);
        }
      }
    });
  }
  ~IngestOnly() {
    server->Shutdown(std::chrono::system_clock::now());
    queue.close();
    consumer.join();
    std::filesystem::remove_all(dir);
    std::filesystem::remove(dir + ".sock");
  }
};

// The tensor in a sealed memfd, as the hook's ring holds a sample (mapped as the hook maps its
// ring, on huge pages where the host allows them): what a shipper shares.
struct SealedCopy {
  int fd = memfd_create("bench", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* base = MAP_FAILED;
  SealedCopy() {
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(kTensorBytes)) != 0) return;
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    base = shm::map_fresh_ring(fd, kTensorBytes);
    if (base != MAP_FAILED) std::memcpy(base, tensor().data(), kTensorBytes);
  }
  ~SealedCopy() {
    if (base != MAP_FAILED) munmap(base, kTensorBytes);
    if (fd >= 0) close(fd);
  }
  // Whether the host gave it huge pages: its mapping's ShmemPmdMapped in /proc/self/smaps.
  bool huge_pages() const {
    std::ifstream smaps("/proc/self/smaps");
    char start[32];
    std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(base));
    bool inside = false;
    for (std::string line; std::getline(smaps, line);) {
      const std::size_t dash = line.find('-');
      if (dash != std::string::npos && dash < line.find(' ')) inside = line.rfind(start, 0) == 0;  // a mapping's first line
      if (inside && line.rfind("ShmemPmdMapped:", 0) == 0) return std::stoul(line.substr(15)) > 0;
    }
    return false;
  }
  std::span<const std::uint8_t> bytes() const { return {static_cast<const std::uint8_t*>(base), kTensorBytes}; }
};

// range(0): 0 over loopback TCP, 1 over a unix socket, 2 over a unix socket with the payload
// in shared memory the daemon copies out of.
void BM_IngestStream(benchmark::State& state) {
  const bool shared = state.range(0) == 2;
  IngestOnly d(state.range(0) >= 1, shared);
  ConnectionOptions o;
  o.endpoint = d.address;
  auto stream = SampleStream::open(o, hello());
  if (!stream.ok()) {
    state.SkipWithError(stream.message().c_str());
    return;
  }
  SealedCopy copy;
  std::span<const std::uint8_t> payload = tensor();
  if (shared) {
    if (copy.base == MAP_FAILED) {
      state.SkipWithError("memfd failed");
      return;
    }
    if (Status s = stream.value()->share_memory(copy.fd, copy.base, kTensorBytes); !s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
    payload = copy.bytes();
    state.counters["huge_pages"] = copy.huge_pages() ? 1 : 0;
  }
  std::uint64_t step = 0;
  for (auto _ : state) {
    if (!stream.value()->send(header(step++), payload).ok()) state.SkipWithError("send failed");
  }
  if (!stream.value()->wait_for_acks(600).ok()) state.SkipWithError("acks missing");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kTensorBytes));
}

// p50/p99 of fp8scope_analysis_seconds from the exposition, by linear interpolation in the buckets.
void BM_AnalysisLatencyUnderLoad(benchmark::State& state) {
  BenchDaemon d(2);
  ConnectionOptions o;
  o.endpoint = d.daemon->grpc_address();
  auto stream = SampleStream::open(o, hello());
  if (!stream.ok()) {
    state.SkipWithError(stream.message().c_str());
    return;
  }
  std::uint64_t step = 0;
  for (auto _ : state) {
    for (int i = 0; i < 16; ++i) (void)stream.value()->send(header(step++), tensor());
    (void)stream.value()->wait_for_acks(600);
  }
  // Let the queue drain, then read the histogram.
  std::string text;
  for (int tries = 0; tries < 600; ++tries) {
    const std::string addr = d.daemon->metrics_address();
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    text.clear();
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    close(fd);
    if (text.find("fp8scope_analysis_seconds_count " + std::to_string(step)) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
  std::istringstream in(text);
  double count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("fp8scope_analysis_seconds_bucket{le=\"", 0) == 0) {
      const auto q = line.find('"', 37);
      const std::string le = line.substr(37, q - 37);
      buckets.emplace_back(le == "+Inf" ? INFINITY : std::stod(le), std::stod(line.substr(line.rfind(' ') + 1)));
    }
    if (line.rfind("fp8scope_analysis_seconds_count ", 0) == 0) count = std::stod(line.substr(32));
  }
  auto quantile = [&](double q) {
    const double target = q * count;
    double prev_le = 0, prev_count = 0;
    for (const auto& [le, c] : buckets) {
      if (c >= target) {
        if (std::isinf(le)) return prev_le;
        return prev_le + (le - prev_le) * (target - prev_count) / std::max(c - prev_count, 1.0);
      }
      prev_le = le;
      prev_count = c;
    }
    return prev_le;
  };
  state.counters["p50_seconds"] = quantile(0.5);
  state.counters["p99_seconds"] = quantile(0.99);
  state.counters["samples"] = count;
}

// Throughput ratios: baseline time / ingest time (1.0 = as fast as the baseline).
void ratios(const std::string& name, double seconds, benchmark::UserCounters& counters) {
  if (name.rfind("BM_RawTcpLoopback", 0) == 0) g_raw_seconds = seconds;
  if (name.rfind("BM_Memcpy", 0) == 0) g_memcpy_seconds = seconds;
  if (name.rfind("BM_IngestStream/transport:0", 0) == 0 && g_raw_seconds > 0) counters["x_raw_tcp"] = g_raw_seconds / seconds;
  if ((name.rfind("BM_IngestStream/transport:1", 0) == 0 || name.rfind("BM_IngestStream/transport:2", 0) == 0 ||
       name.rfind("BM_RawUnixSocket", 0) == 0) &&
      g_memcpy_seconds > 0) {
    counters["x_memcpy"] = g_memcpy_seconds / seconds;
  }
}

}  // namespace

BENCHMARK(BM_Memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RawTcpLoopback)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RawUnixSocket)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IngestStream)->UseRealTime()->Unit(benchmark::kMillisecond)->DenseRange(0, 2)->ArgName("transport");
BENCHMARK(BM_AnalysisLatencyUnderLoad)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(4);

int main(int argc, char** argv) {
  server::bound_heap_memory();  // as fp8scoped does
  benchmark::Initialize(&argc, argv);
  bench::MedianReporter reporter(ratios);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
