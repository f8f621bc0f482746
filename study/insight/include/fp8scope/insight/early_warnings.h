// Which tensors' early warnings rose before a loss onset, and how many steps ahead: the statistics
// that papers find lead a divergence (activation kurtosis, FOG arXiv 2505.20524; outlier channels,
// arXiv 2409.12517 and 2602.02047), read from each tensor's own past. A warning has risen when its
// last samples before the onset all stand above its earlier baseline; it leads by the steps from
// the first of them to the onset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

struct WarningOptions {
  std::size_t lookback_samples = 64;  // sampled steps before the onset that are read
  std::size_t baseline_samples = 8;   // the earliest of them: the tensor's normal
  double rise_sigmas = 3;             // a sample above baseline + this many robust sigmas has risen
  std::size_t min_run = 2;            // risen samples in a row, up to the onset, that make a warning
};

struct EarlyWarning {
  TensorKey tensor;
  std::string signal;        // kurtosis, channel_amax_ratio, persistent_outlier_channels
  double baseline = 0;       // the signal's median over the baseline samples
  double before_onset = 0;   // its last value before the onset
  double score = 0;          // that value over the baseline, in robust sigmas (log10 for the ratios)
  std::uint64_t first_step = 0;   // the first of the risen samples that run up to the onset
  std::uint64_t steps_ahead = 0;  // onset - first_step
};

// Every tensor and signal that had risen when the onset came, longest lead first.
std::vector<EarlyWarning> early_warnings(const RunRecords& run, std::uint64_t onset_step,
                                         const WarningOptions& options = {});

}  // namespace fp8scope::insight
