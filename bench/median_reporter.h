// The console reporter every benchmark here prints through: each run's real time in seconds (the
// median's, with --benchmark_repetitions; means and spreads get nothing) handed to the
// benchmark's own rule, which adds counters against the baselines it saw earlier in the same run.
#pragma once

#include <benchmark/benchmark.h>

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
    for (Run& r : out) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      rule_(r.benchmark_name(), r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit), r.counters);
    }
    ConsoleReporter::ReportRuns(out);
  }

 private:
  Rule rule_;
};

}  // namespace fp8scope::bench
