// What a run's loss curve says: spikes (a robust z-score of log-loss against a trailing window:
// the median of its last points as the level, the MAD of its step-to-step changes as the noise, so
// neither a falling trend nor earlier spikes hide a spike) with their height and the steps to
// recover, and divergence (the loss leaves its best level for good). Plain functions on a series,
// so the daemon's history, a file or a test can feed them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace fp8scope::insight {

struct ScalarPoint {
  std::uint64_t step;
  double value;
};

struct SpikeOptions {
  std::size_t window = 50;      // trailing points the baseline comes from
  std::size_t min_window = 10;  // no verdict before this many points
  double threshold = 6.0;       // robust z of log-loss above which a point is a spike
  double recovered_z = 3.0;     // back within this many robust sigmas: recovered
};

struct Spike {
  std::uint64_t start_step = 0, peak_step = 0;
  double baseline = 0;      // the window's median loss before the spike
  double peak = 0;          // the highest loss of the spike
  double height = 0;        // peak / baseline
  double z = 0;             // the peak's robust z-score
  std::optional<std::uint64_t> recovered_step;  // first step back near the baseline, if any
  std::optional<std::uint64_t> steps_to_recover() const {
    if (!recovered_step) return std::nullopt;
    return *recovered_step - peak_step;
  }
};

// Spikes in step order. Points must be in step order; non-finite or non-positive losses are
// spikes of unbounded height (a NaN loss is the worst spike there is).
std::vector<Spike> find_spikes(const std::vector<ScalarPoint>& series, const SpikeOptions& options = {});

struct DivergenceOptions {
  double factor = 1.5;           // loss above factor x its best so far...
  std::size_t min_points = 10;   // ...for at least this many points, to the end of the series
};

struct Divergence {
  std::uint64_t onset_step = 0;  // the first step of the final stretch above the best level
  double best = 0;               // the best loss before it
  double last = 0;               // the last loss of the series
};

// The onset of divergence, if the series ends diverged.
std::optional<Divergence> find_divergence(const std::vector<ScalarPoint>& series, const DivergenceOptions& options = {});

}  // namespace fp8scope::insight
