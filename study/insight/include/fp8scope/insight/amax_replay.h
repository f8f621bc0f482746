// Delayed scaling replayed on a tensor's sampled amax series: for each candidate amax_history_len
// and margin, the scale TE's rule would have held at every sampled step (fmax * 2^-margin over the
// largest amax of the history window before it) and what that costs: steps whose amax the scale
// clips, and binades of headroom left unused (each one pushes the smallest values into underflow).
// With sampling every N steps the window only sees sampled amaxes, so it is an approximation that
// cannot tell history lengths below N apart.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fp8scope/kernels/float_formats.h"

namespace fp8scope::insight {

struct AmaxPoint {
  std::uint64_t step;
  double amax;
};

struct ReplayOutcome {
  int history_len = 0;
  int margin = 0;
  std::size_t clipped_steps = 0;    // sampled steps whose amax exceeded fmax / scale
  double worst_clip_log2 = 0;       // the largest log2(amax * scale / fmax) among them
  double mean_headroom_log2 = 0;    // mean log2(fmax / (amax * scale)) over the unclipped steps
  std::size_t steps = 0;            // sampled steps with a history to judge from
};

ReplayOutcome replay_delayed(const std::vector<AmaxPoint>& series, CastFormat format, int history_len, int margin);

struct ReplaySuggestion {
  ReplayOutcome te_default;  // amax_history_len 1024, margin 0
  ReplayOutcome best;        // the fewest clipped steps, then the least headroom
};

// The candidates are history lengths {1, 4, 16, 64, 256, 1024} not shorter than the sampling
// interval, and margins 0..4. Nothing when the series has fewer than two points.
std::optional<ReplaySuggestion> suggest_delayed_scaling(const std::vector<AmaxPoint>& series, CastFormat format,
                                                        std::uint64_t sampling_interval);

}  // namespace fp8scope::insight
