#include "fp8scope/insight/run_comparison.h"

#include <algorithm>
#include <cstdio>

namespace fp8scope::insight {
namespace {

// How much worse before it is called worse: 1.5x the baseline, and at least two spikes.
constexpr double kWorseFactor = 1.5;
constexpr std::size_t kMinSpikes = 2;

template <class... Args>
std::string format(const char* fmt, Args... args) {
  char text[256];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

}  // namespace

RunLoss analyze_run_loss(std::string run, std::vector<ScalarPoint> series, const SpikeOptions& spike_options,
                         const DivergenceOptions& divergence_options) {
  RunLoss r;
  r.run = std::move(run);
  r.series = std::move(series);
  r.spikes = find_spikes(r.series, spike_options);
  r.divergence = find_divergence(r.series, divergence_options);
  const double steps = r.series.size() < 2 ? 1.0 : static_cast<double>(r.series.back().step - r.series.front().step + 1);
  r.spikes_per_1k_steps = 1000.0 * static_cast<double>(r.spikes.size()) / steps;
  std::vector<double> recoveries;
  for (const Spike& s : r.spikes) {
    if (const auto steps_to = s.steps_to_recover()) {
      recoveries.push_back(static_cast<double>(*steps_to));
    } else {
      ++r.unrecovered;
    }
  }
  if (!recoveries.empty()) {
    std::sort(recoveries.begin(), recoveries.end());
    const std::size_t mid = recoveries.size() / 2;
    r.median_recovery_steps =
        recoveries.size() % 2 != 0 ? recoveries[mid] : 0.5 * (recoveries[mid - 1] + recoveries[mid]);
  }
  return r;
}

LossComparison compare_loss(RunLoss run, RunLoss baseline) {
  LossComparison c;
  if (run.divergence && !baseline.divergence) {
    c.findings.push_back(format("diverges from step %.0f (its loss ends %.3gx its best); the baseline does not",
                                static_cast<double>(run.divergence->onset_step), run.divergence->last / run.divergence->best));
  }
  if (run.spikes.size() >= kMinSpikes && run.spikes_per_1k_steps > kWorseFactor * baseline.spikes_per_1k_steps) {
    c.findings.push_back(format("spikes more often: %.2f vs %.2f per 1,000 steps", run.spikes_per_1k_steps,
                                baseline.spikes_per_1k_steps));
  }
  if (run.unrecovered > baseline.unrecovered) {
    c.findings.push_back(format("%.0f spikes never recover, the baseline's %.0f", static_cast<double>(run.unrecovered),
                                static_cast<double>(baseline.unrecovered)));
  }
  if (run.median_recovery_steps && baseline.median_recovery_steps &&
      *run.median_recovery_steps > kWorseFactor * *baseline.median_recovery_steps) {
    c.findings.push_back(format("recovers more slowly: median %.0f vs %.0f steps after a spike",
                                *run.median_recovery_steps, *baseline.median_recovery_steps));
  } else if (run.median_recovery_steps && !baseline.median_recovery_steps && run.spikes.size() >= kMinSpikes) {
    c.findings.push_back(format("needs a median %.0f steps to recover from spikes the baseline does not have",
                                *run.median_recovery_steps));
  }
  c.run_worse = !c.findings.empty();
  c.run = std::move(run);
  c.baseline = std::move(baseline);
  return c;
}

}  // namespace fp8scope::insight
