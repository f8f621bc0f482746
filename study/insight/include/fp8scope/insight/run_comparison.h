// An FP8 run's loss against its BF16 baseline: the spikes of each side by side, and whether FP8's
// are more frequent, recover more slowly, or end in divergence the baseline does not show.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fp8scope/insight/loss_signals.h"

namespace fp8scope::insight {

struct RunLoss {
  std::string run;
  std::vector<ScalarPoint> series;
  std::vector<Spike> spikes;
  std::optional<Divergence> divergence;
  double spikes_per_1k_steps = 0;
  std::optional<double> median_recovery_steps;  // over the recovered spikes
  std::size_t unrecovered = 0;
};

RunLoss analyze_run_loss(std::string run, std::vector<ScalarPoint> series, const SpikeOptions& spikes = {},
                         const DivergenceOptions& divergence = {});

struct LossComparison {
  RunLoss run, baseline;
  bool run_worse = false;             // any finding below counts against the run
  std::vector<std::string> findings;  // one sentence each, most serious first
};

LossComparison compare_loss(RunLoss run, RunLoss baseline);

}  // namespace fp8scope::insight
