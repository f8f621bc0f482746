#include "fp8scope/insight/loss_signals.h"

#include <algorithm>
#include <cmath>

namespace fp8scope::insight {
namespace {

// The consistency constant that makes the MAD estimate sigma for normal data.
constexpr double kMadToSigma = 1.4826;

double median(std::vector<double> v) {
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 != 0) return upper;
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)));
}

bool usable(double loss) { return std::isfinite(loss) && loss > 0.0; }

// The robust location and scale of log-loss over points [begin, end) that are usable.
struct Baseline {
  double center = 0, sigma = 0;
  bool valid = false;
};

// The loss level just before a point is the median of the window's last few points; its noise is
// the spread of the window's step-to-step changes (MAD of first differences / sqrt 2), which a
// falling trend, unlike the spread of the values themselves, does not inflate.
constexpr std::size_t kLevelPoints = 10;

Baseline baseline_of(const std::vector<ScalarPoint>& s, std::size_t begin, std::size_t end, std::size_t min_points) {
  std::vector<double> logs;
  for (std::size_t i = begin; i < end; ++i) {
    if (usable(s[i].value)) logs.push_back(std::log(s[i].value));
  }
  Baseline b;
  if (logs.size() < min_points || logs.size() < 3) return b;
  b.center = median(std::vector<double>(logs.end() - static_cast<std::ptrdiff_t>(std::min(kLevelPoints, logs.size())), logs.end()));
  std::vector<double> steps;
  for (std::size_t i = 1; i < logs.size(); ++i) steps.push_back(logs[i] - logs[i - 1]);
  const double typical = median(steps);
  std::vector<double> deviations;
  for (double d : steps) deviations.push_back(std::fabs(d - typical));
  // A perfectly flat window has no spread; a floor of 0.1% keeps the z-score finite.
  b.sigma = std::max(kMadToSigma * median(deviations) / std::sqrt(2.0), 1e-3);
  b.valid = true;
  return b;
}

double z_of(double loss, const Baseline& b) {
  return usable(loss) ? (std::log(loss) - b.center) / b.sigma : INFINITY;
}

}  // namespace

std::vector<Spike> find_spikes(const std::vector<ScalarPoint>& s, const SpikeOptions& o) {
  std::vector<Spike> spikes;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t begin = i > o.window ? i - o.window : 0;
    const Baseline b = baseline_of(s, begin, i, o.min_window);
    if (!b.valid || z_of(s[i].value, b) <= o.threshold) {
      ++i;
      continue;
    }
    // A spike: it lasts while points stay above the threshold against the same baseline.
    Spike spike;
    spike.start_step = s[i].step;
    spike.baseline = std::exp(b.center);
    std::size_t j = i;
    for (; j < s.size() && z_of(s[j].value, b) > o.threshold; ++j) {
      const double z = z_of(s[j].value, b);
      if (j == i || z > spike.z) {
        spike.z = z;
        spike.peak_step = s[j].step;
        spike.peak = s[j].value;
      }
    }
    spike.height = usable(spike.peak) ? spike.peak / spike.baseline : INFINITY;
    for (std::size_t k = j; k < s.size(); ++k) {
      if (z_of(s[k].value, b) <= o.recovered_z) {
        spike.recovered_step = s[k].step;
        break;
      }
    }
    spikes.push_back(spike);
    // Later points judge against a window that skips the spike itself.
    i = j;
  }
  return spikes;
}

std::optional<Divergence> find_divergence(const std::vector<ScalarPoint>& s, const DivergenceOptions& o) {
  if (s.size() < o.min_points + 1) return std::nullopt;
  // Walk back from the end while the loss stays above factor x the best loss before that point.
  std::vector<double> best_before(s.size(), INFINITY);
  for (std::size_t i = 1; i < s.size(); ++i) {
    const double v = usable(s[i - 1].value) ? s[i - 1].value : INFINITY;
    best_before[i] = std::min(best_before[i - 1], v);
  }
  std::size_t onset = s.size();
  while (onset > 1) {
    const std::size_t k = onset - 1;
    const bool above = !usable(s[k].value) || s[k].value > o.factor * best_before[k];
    if (!above) break;
    onset = k;
  }
  if (s.size() - onset < o.min_points || !std::isfinite(best_before[onset])) return std::nullopt;
  return Divergence{s[onset].step, best_before[onset], s.back().value};
}

}  // namespace fp8scope::insight
