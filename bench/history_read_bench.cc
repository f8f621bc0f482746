// compare and report over a large history: wall time and peak memory of the real `fp8scope`
// commands over N records of one run of T tensors (--fp8scope_records, default 200,000; the README's
// figures are from 1,000,000 and 10,000,000; --fp8scope_tensors, default 100), against a same-run
// baseline: streaming every record out of the same SQLite file with nothing kept (Read/raw). compare
// runs twice, with the default bounded series and with --series-points 0 (every point kept, as
// before series were bounded). Counters: seconds, peak_rss_mb and bytes_per_record (peak resident
// memory over N), and x_raw_read (the command's time over the raw read's).
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "../tests/support/process.h"
#include "../tests/support/temp_dir.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/insight/run_records.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"

using namespace fp8scope;

namespace {

std::int64_t g_records = 200000;
int g_tensors = 100;
testing::TempDir* g_dir = nullptr;
double g_raw_seconds = 0;

// One run of g_tensors activations sampled at every step under every recipe, and two runs' loss.
void write_history(const std::string& dir) {
  auto store = std::move(history::HistoryStore::open(dir, {"bench:/data", 0})).value();
  const int recipes = static_cast<int>(std::size(kDefaultRecipeKinds));
  const std::int64_t steps = g_records / (g_tensors * recipes);
  for (std::int64_t step = 0; step < steps; ++step) {
    for (int t = 0; t < g_tensors; ++t) {
      for (int k = 0; k < recipes; ++k) {
        history::HistoryRecord r;
        r.time = 1.8e9 + static_cast<double>(step);
        r.job = "bench";
        r.run = "fp8";
        r.host = "gpu-node-0";
        r.step = static_cast<std::uint64_t>(step);
        r.layer = "blocks." + std::to_string(t / 8) + ".linear" + std::to_string(t % 8);
        r.gemm = GemmRole::kFprop;
        r.operand = Operand::kX;
        r.dtype = DType::kBF16;
        r.numel = 1 << 20;
        r.caster = Caster::recipe(kDefaultRecipeKinds[k]);
        r.format = CastFormat::kE4M3;
        r.scale = 448.0 / (1 + (step + t) % 7);
        r.scale_current = r.scale * (1 + 0.01 * (step % 5));
        r.statistics.assign(statistics().size(), 0.0);
        for (std::size_t s = 0; s < statistics().size(); ++s) r.statistics[s] = 1e-3 * static_cast<double>(1 + (s + t + step) % 17);
        r.histogram.assign(49, 1);
        store->add(std::move(r));
      }
    }
    // Within the writer's backlog bound, so nothing is dropped.
    if (!store->flush().ok()) std::abort();
    for (const char* run : {"fp8", "bf16"}) {
      store->add(history::ScalarRecord{1.8e9, "bench", run, "gpu-node-0", 0, static_cast<std::uint64_t>(step), "loss",
                                       3.0 - 0.001 * static_cast<double>(step) + (step % 97 == 50 && run[0] == 'f' ? 2.0 : 0.0)});
    }
  }
  if (!store->flush().ok()) std::abort();
}

struct Measured {
  double seconds = 0;
  long peak_kb = 0;
  int exit_code = -1;
};

// Runs argv in a forked helper whose only child is the command, so RUSAGE_CHILDREN is that
// command's own peak.
Measured measure(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const auto start = std::chrono::steady_clock::now();
  const pid_t helper = fork();
  if (helper == 0) {
    close(fds[0]);
    const testing::ProcessResult r = testing::run_process(argv, {}, 3600);
    rusage usage{};
    getrusage(RUSAGE_CHILDREN, &usage);
    const long out[2] = {usage.ru_maxrss, r.exit_code};
    (void)!write(fds[1], out, sizeof out);
    _exit(0);
  }
  close(fds[1]);
  long in[2] = {0, -1};
  (void)!read(fds[0], in, sizeof in);
  close(fds[0]);
  waitpid(helper, nullptr, 0);
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), in[0], static_cast<int>(in[1])};
}

void report(benchmark::State& state, const Measured& m) {
  state.counters["seconds"] = m.seconds;
  state.counters["peak_rss_mb"] = static_cast<double>(m.peak_kb) / 1024.0;
  state.counters["bytes_per_record"] = static_cast<double>(m.peak_kb) * 1024.0 / static_cast<double>(g_records);
  if (g_raw_seconds > 0) state.counters["x_raw_read"] = m.seconds / g_raw_seconds;
}

void BM_RawRead(benchmark::State& state) {
  for (auto _ : state) {
    auto reader = std::move(history::open_history_reader(g_dir->path())).value();
    history::HistoryFilter all;
    all.run = "fp8";
    all.limit = 0;
    std::uint64_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    if (!reader->query(all, [&](const history::HistoryRecord&) { return ++n > 0; }).ok()) state.SkipWithError("read failed");
    g_raw_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.counters["records"] = static_cast<double>(n);
    state.counters["seconds"] = g_raw_seconds;
  }
}

void BM_Command(benchmark::State& state, const std::string& command, const std::string& series_points) {
  for (auto _ : state) {
    std::vector<std::string> argv = {FP8SCOPE_CLI, command, "--data-dir", g_dir->path(), "--run", "fp8", "--baseline", "bf16",
                                     "--series-points", series_points};
    if (command == "report") argv.insert(argv.end(), {"-o", g_dir->file("report.html")});
    const Measured m = measure(argv);
    if (m.exit_code != 0) state.SkipWithError((command + " failed").c_str());
    report(state, m);
  }
}

BENCHMARK(BM_RawRead)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Command, compare, std::string("compare"), std::to_string(insight::kDefaultSeriesPoints))->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Command, report, std::string("report"), std::to_string(insight::kDefaultSeriesPoints))->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Command, compare_every_point, std::string("compare"), std::string("0"))->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--fp8scope_records=", 19) == 0) g_records = std::atoll(argv[i] + 19);
    if (std::strncmp(argv[i], "--fp8scope_tensors=", 19) == 0) g_tensors = std::max(1, std::atoi(argv[i] + 19));
  }
  testing::TempDir dir;
  g_dir = &dir;
  write_history(dir.path());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
