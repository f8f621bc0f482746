// What the hook and the daemon cost a training job: tiny_trainer's step time under `fp8scope run`
// with a live fp8scoped at the default policy (every 10th step sampled), against tiny_trainer
// alone, in the same run (target: <= 1.03x; counter "x_alone"). The trainer runs on the CPU
// fixtures with 256-wide layers and batches of 128 (about 20 ms a step here; its figure leaves
// out step 0, which pays the hook's one-time set-up). As in a real job, where the trainer owns its
// cores and the daemon analyzes on its own GPU, the trainer (and the hook's publisher thread
// inside it) is pinned to core 0 and fp8scoped, `fp8scope run` and the shipper the hook starts
// (--shipper-cpus) to core 1; on a one-core machine nothing is pinned and they share it.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace {

constexpr int kSteps = 60;
double g_alone_ms = 0.0;

// Runs a shell command line and returns tiny_trainer's "N ms/step" figure.
double ms_per_step(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return 0.0;
  char line[512];
  double ms = 0.0;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (const char* at = std::strstr(line, " ms/step"); at != nullptr) {
      const char* start = at;
      while (start > line && start[-1] != ' ') --start;
      ms = std::atof(start);
    }
  }
  pclose(p);
  return ms;
}

bool pinned() { return std::thread::hardware_concurrency() >= 2; }

// `command` pinned to one core when there are two.
std::string on_core(int core, const std::string& command) {
  return pinned() ? "taskset -c " + std::to_string(core) + " " + command : command;
}

std::string trainer_command() {
  return on_core(0, FP8SCOPE_TINY_TRAINER) + " --hidden 256 --batch 128 --steps " + std::to_string(kSteps);
}

// One fp8scoped for the whole run, on free loopback ports.
const std::string& daemon_endpoint() {
  static const std::string endpoint = [] {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fp8scope-bench-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string ready = (dir / "ready.json").string();
    const std::string command = on_core(1, FP8SCOPE_DAEMON) + " --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --engine-threads 1 --analysis-workers 1 --data-dir " +
                                dir.string() + " --ready-file " + ready + " --log-level warn > " + (dir / "log").string() +
                                " 2>&1 & echo $! > " + (dir / "pid").string();
    if (std::system(command.c_str()) != 0) return std::string();
    for (int i = 0; i < 300 && !std::filesystem::exists(ready); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(ready);
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto key = json.find("\"grpc\":\"");
    if (key == std::string::npos) return std::string();
    const auto start = key + 8;
    return json.substr(start, json.find('"', start) - start);
  }();
  return endpoint;
}

void stop_daemon() {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fp8scope-bench-" + std::to_string(getpid()));
  std::ifstream pid(dir / "pid");
  int p = 0;
  if (pid >> p && p > 0) kill(p, SIGTERM);
}

void BM_TrainerAlone(benchmark::State& state) {
  for (auto _ : state) {
    const double ms = ms_per_step(trainer_command());
    state.SetIterationTime(ms / 1e3);
    g_alone_ms = g_alone_ms == 0.0 ? ms : std::min(g_alone_ms, ms);
  }
}

void BM_TrainerUnderHookWithDaemon(benchmark::State& state) {
  const std::string endpoint = daemon_endpoint();
  if (endpoint.empty()) {
    state.SkipWithError("fp8scoped did not start");
    return;
  }
  double best = 0.0;
  for (auto _ : state) {
    const double ms = ms_per_step(on_core(1, FP8SCOPE_CLI) + " run --endpoint " + endpoint + " --reset --job bench " +
                                  (pinned() ? "--shipper-cpus 1 " : "") + "-- " +
                                  trainer_command() + " 2>/dev/null");
    state.SetIterationTime(ms / 1e3);
    best = best == 0.0 ? ms : std::min(best, ms);
  }
  if (g_alone_ms > 0.0) state.counters["x_alone"] = best / g_alone_ms;
  state.counters["pinned"] = pinned() ? 1 : 0;
}

BENCHMARK(BM_TrainerAlone)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainerUnderHookWithDaemon)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  stop_daemon();
  return 0;
}
