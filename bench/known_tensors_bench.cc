// Analysis rate against how many tensors the daemon already knows: small samples (where the
// per-sample bookkeeping, not the statistics, sets the pace) pushed to an in-process fp8scoped,
// cycling over N tensors it has seen, N = 10 (the baseline of the same run) up to twice the
// default --max-series. Issue 15 measured 2,740 samples/s falling to 188 (14.6x) once 20,000
// tensors were known; the per-tensor tables are now LRU maps, so the rate should not depend on N.
// Counter "x_10_tensors": samples/s at N over samples/s at N = 10.
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "fp8scope/daemon/daemon.h"
#include "fp8scope/daemon/memory_tuning.h"
#include "fp8scope/daemon_client/daemon_channel.h"
#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/wire/wire.h"
#include "median_reporter.h"

using namespace fp8scope;

namespace {

constexpr int kTimedSamples = 2000;
const std::vector<float> kValues(256, 0.75f);  // 16x16 f32
double g_baseline_rate = 0.0;

v1::TensorHeader header(int tensor, std::uint64_t step) {
  v1::TensorHeader h;
  h.set_step(step);
  h.set_layer("blocks." + std::to_string(tensor) + ".mlp");
  h.set_gemm(v1::GEMM_FPROP);
  h.set_operand(v1::OPERAND_X);
  h.set_dtype(v1::DTYPE_F32);
  h.add_shape(16);
  h.add_shape(16);
  return h;
}

std::uint64_t analyzed(const std::shared_ptr<grpc::Channel>& channel) {
  auto admin = v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  v1::DaemonStatus status;
  if (!admin->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok()) return 0;
  return status.samples_analyzed();
}

// Sends `count` samples over the tensors [0, tensors) and waits until all are analyzed.
bool push(SampleStream& stream, const std::shared_ptr<grpc::Channel>& channel, int tensors, int count,
          std::uint64_t& step, std::uint64_t& total) {
  const std::span<const std::uint8_t> bytes{reinterpret_cast<const std::uint8_t*>(kValues.data()),
                                            kValues.size() * sizeof(float)};
  for (int i = 0; i < count; ++i) {
    if (!stream.send(header(i % tensors, step), bytes).ok()) return false;
    if (i % tensors == tensors - 1) ++step;
  }
  if (!stream.wait_for_acks(600).ok()) return false;
  total += static_cast<std::uint64_t>(count);
  for (int tries = 0; tries < 60000 && analyzed(channel) < total; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return analyzed(channel) >= total;
}

void BM_AnalysisRate(benchmark::State& state) {
  const int tensors = static_cast<int>(state.range(0));
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("fp8scope-known-" + std::to_string(getpid()))).string();
  server::DaemonConfig c;
  c.listen = "127.0.0.1:0";
  c.metrics = "127.0.0.1:0";
  c.data_dir = dir;
  c.backend = "cpu";
  auto daemon = server::Daemon::start(c);
  if (!daemon.ok()) {
    state.SkipWithError(daemon.message().c_str());
    return;
  }
  ConnectionOptions o;
  o.endpoint = daemon.value()->grpc_address();
  auto channel = open_channel(o).value();
  v1::Hello hello = make_hello("bench", "known", 0, 1, 0);
  auto stream = SampleStream::open(o, hello);
  if (!stream.ok()) {
    state.SkipWithError(stream.message().c_str());
    return;
  }
  std::uint64_t step = 0, total = 0;
  // Untimed: the daemon learns every tensor once.
  if (!push(*stream.value(), channel, tensors, tensors, step, total)) state.SkipWithError("warm-up failed");
  for (auto _ : state) {
    if (!push(*stream.value(), channel, tensors, kTimedSamples, step, total)) state.SkipWithError("push failed");
  }
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(kTimedSamples), benchmark::Counter::kIsIterationInvariantRate);
  stream.value().reset();
  daemon.value().reset();
  std::filesystem::remove_all(dir);
}

void ratios(const std::string& name, double, benchmark::UserCounters& counters) {
  const auto it = counters.find("samples_per_s");
  if (it == counters.end()) return;
  const double rate = it->second.value;  // already per second of real time
  if (name.find("/10/") != std::string::npos) g_baseline_rate = rate;
  if (g_baseline_rate > 0) counters["x_10_tensors"] = rate / g_baseline_rate;
}

}  // namespace

BENCHMARK(BM_AnalysisRate)->Arg(10)->Arg(2000)->Arg(20000)->Arg(40000)->Iterations(3)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  server::bound_heap_memory();  // as fp8scoped does
  spdlog::set_level(spdlog::level::warn);
  benchmark::Initialize(&argc, argv);
  bench::MedianReporter reporter(ratios);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
