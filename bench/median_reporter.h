// The console reporter every benchmark here prints through: each run's real time in seconds (the
// median's, with --benchmark_repetitions; means and spreads get nothing) handed to the
// benchmark's own rule, which adds counters against the baselines it saw earlier in the same run.
// With FP8SCOPE_BENCH_COUNTERS set to a file, each such run's counters are also appended there,
// one "benchmark<TAB>counter<TAB>value" line each (scripts/bench-check.sh reads them).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fp8scope::bench {

class MedianReporter : public benchmark::ConsoleReporter {
 public:
  using Rule = std::function<void(const std::string& name, double seconds, benchmark::UserCounters& counters)>;
  explicit MedianReporter(Rule rule) : rule_(std::move(rule)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> out = runs;
    const char* counters_file = std::getenv("FP8SCOPE_BENCH_COUNTERS");
    std::ofstream counters_out;
    if (counters_file != nullptr && *counters_file != '\0') counters_out.open(counters_file, std::ios::app);
    for (Run& r : out) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const double seconds = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      rule_(r.benchmark_name(), seconds, r.counters);
      if (!counters_out.is_open()) continue;
      counters_out << r.benchmark_name() << "\tseconds\t" << seconds << "\n";
      for (const auto& [name, counter] : r.counters) counters_out << r.benchmark_name() << '\t' << name << '\t' << counter.value << '\n';
    }
    ConsoleReporter::ReportRuns(out);
  }

 private:
  Rule rule_;
};

}  // namespace fp8scope::bench
