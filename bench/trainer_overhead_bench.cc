// What the hook and the daemon cost a training job: tiny_trainer's step time under `fp8scope run`
// with a live fp8scoped at the default policy (every 10th step sampled), against tiny_trainer
// alone, in the same run (target: <= 1.03x; counter "x_alone"). The trainer runs on the CPU
// fixtures with 256-wide layers and batches of 128 (about 20 ms a step here; its figure leaves
// out step 0, which pays the hook's one-time set-up). As in a real job, where the trainer owns its
// cores and the daemon analyzes on its own GPU, the trainer (and the hook's publisher thread
// inside it) is pinned to core 0 and fp8scoped, `fp8scope run` and the shipper the hook starts
// (--shipper-cpus) to core 1; on a one-core machine nothing is pinned and they share it.
// The same again with the step as a CUDA graph (--cuda-graph, FP8): replays under the hook against
// replays alone, and how many nodes the hook's recording adds to the step's graph ("nodes_added":
// one per operand the policy can select).
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

// What one tiny_trainer run printed: its "N ms/step" figure and its step graph's "graph: N nodes".
struct TrainerRun {
  double ms = 0.0;
  long nodes = 0;
};

// Runs a shell command line and reads tiny_trainer's figures from its output.
TrainerRun run_trainer(const std::string& command) {
  TrainerRun run;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return run;
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (const char* at = std::strstr(line, " ms/step"); at != nullptr) {
      const char* start = at;
      while (start > line && start[-1] != ' ') --start;
      run.ms = std::atof(start);
    }
    if (std::strncmp(line, "graph: ", 7) == 0) run.nodes = std::atol(line + 7);
  }
  pclose(p);
  return run;
}

bool pinned() { return std::thread::hardware_concurrency() >= 2; }

// `command` pinned to one core when there are two.
std::string on_core(int core, const std::string& command) {
  return pinned() ? "taskset -c " + std::to_string(core) + " " + command : command;
}

std::string trainer_command(const std::string& flags = "") {
  return on_core(0, FP8SCOPE_TINY_TRAINER) + " --hidden 256 --batch 128 --steps " + std::to_string(kSteps) + flags;
}
const std::string kGraphed = " --mode fp8 --cuda-graph";

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

// The trainer alone: its best step time (and its graph's nodes, when graphed) for the run's baseline.
TrainerRun trainer_alone(benchmark::State& state, const std::string& flags) {
  TrainerRun best;
  for (auto _ : state) {
    const TrainerRun run = run_trainer(trainer_command(flags));
    state.SetIterationTime(run.ms / 1e3);
    if (best.ms == 0.0 || run.ms < best.ms) best = run;
  }
  return best;
}

// The trainer under `fp8scope run` with the daemon: its best step time against `alone`'s.
TrainerRun trainer_under_hook(benchmark::State& state, const std::string& flags, const TrainerRun& alone) {
  TrainerRun best;
  const std::string endpoint = daemon_endpoint();
  if (endpoint.empty()) {
    state.SkipWithError("fp8scoped did not start");
    return best;
  }
  for (auto _ : state) {
    const TrainerRun run = run_trainer(on_core(1, FP8SCOPE_CLI) + " run --endpoint " + endpoint + " --reset --job bench " +
                                       (pinned() ? "--shipper-cpus 1 " : "") + "-- " + trainer_command(flags) +
                                       " 2>/dev/null");
    state.SetIterationTime(run.ms / 1e3);
    if (best.ms == 0.0 || run.ms < best.ms) best = run;
  }
  if (alone.ms > 0.0) state.counters["x_alone"] = best.ms / alone.ms;
  state.counters["pinned"] = pinned() ? 1 : 0;
  return best;
}

TrainerRun g_alone, g_graphed_alone;

void BM_TrainerAlone(benchmark::State& state) { g_alone = trainer_alone(state, ""); }
void BM_TrainerUnderHookWithDaemon(benchmark::State& state) { trainer_under_hook(state, "", g_alone); }

void BM_GraphedTrainerAlone(benchmark::State& state) {
  g_graphed_alone = trainer_alone(state, kGraphed);
  state.counters["nodes"] = static_cast<double>(g_graphed_alone.nodes);
}
void BM_GraphedTrainerUnderHookWithDaemon(benchmark::State& state) {
  const TrainerRun run = trainer_under_hook(state, kGraphed, g_graphed_alone);
  state.counters["nodes"] = static_cast<double>(run.nodes);
  state.counters["nodes_added"] = static_cast<double>(run.nodes - g_graphed_alone.nodes);
}

BENCHMARK(BM_TrainerAlone)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainerUnderHookWithDaemon)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GraphedTrainerAlone)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GraphedTrainerUnderHookWithDaemon)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  stop_daemon();
  return 0;
}
