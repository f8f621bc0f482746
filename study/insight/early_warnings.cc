#include "fp8scope/insight/early_warnings.h"

#include <algorithm>
#include <cmath>

#include "advice_signals.h"

namespace fp8scope::insight {
namespace {

// A warning read on a scale where a rise is up and comparable: the kurtosis and the channel ratio
// in log10 (they grow by factors), the count of persistent channels as it is. The floor is the
// smallest spread taken as noise, so a flat baseline does not turn a wobble into a warning.
struct WarningSignal {
  StudiedStatistic statistic;
  bool log_scale;
  double floor;
};

constexpr WarningSignal kSignals[] = {
    {"kurtosis", true, 0.05},
    {"channel_amax_ratio", true, 0.05},
    {"persistent_outlier_channels", false, 0.5},
};

double on_scale(const WarningSignal& s, double v) {
  if (!s.log_scale) return v;
  return v > 0 ? std::log10(v) : std::nan("");
}

// Tensor statistics repeat in every recipe's record: the series with the most of them before the
// onset (the job's own codes have no channels, so a what-if's series wins for those).
std::vector<const RecordPoint*> series_before(const TensorRecords& records, const WarningSignal& s, std::uint64_t onset) {
  std::vector<const RecordPoint*> best;
  for (const auto& [recipe, sample] : records.recipes) {
    std::vector<const RecordPoint*> points;
    for (const RecordPoint* p : points_with_onsets(records, recipe, sample)) {
      if (p->step < onset && std::isfinite(on_scale(s, statistic(*p, s.statistic)))) points.push_back(p);
    }
    if (points.size() > best.size()) best = std::move(points);
  }
  return best;
}

}  // namespace

std::vector<EarlyWarning> early_warnings(const RunRecords& run, std::uint64_t onset, const WarningOptions& o) {
  std::vector<EarlyWarning> out;
  for (const auto& [tensor, records] : run.tensors) {
    for (const WarningSignal& s : kSignals) {
      std::vector<const RecordPoint*> points = series_before(records, s, onset);
      if (points.size() > o.lookback_samples) {
        points.erase(points.begin(), points.end() - static_cast<std::ptrdiff_t>(o.lookback_samples));
      }
      if (points.size() < o.baseline_samples + o.min_run) continue;
      std::vector<double> base;
      for (std::size_t k = 0; k < o.baseline_samples; ++k) base.push_back(on_scale(s, statistic(*points[k], s.statistic)));
      const auto [center, sigma] = robust_baseline(base, s.floor);
      auto score = [&](const RecordPoint* p) { return (on_scale(s, statistic(*p, s.statistic)) - center) / sigma; };
      // The run of risen samples that ends at the last one before the onset.
      std::size_t first = points.size();
      while (first > o.baseline_samples && score(points[first - 1]) >= o.rise_sigmas) --first;
      if (points.size() - first < o.min_run) continue;
      EarlyWarning w;
      w.tensor = tensor;
      w.signal = s.statistic.key;
      w.baseline = s.log_scale ? std::pow(10.0, center) : center;
      w.before_onset = statistic(*points.back(), s.statistic);
      w.score = score(points.back());
      w.first_step = points[first]->step;
      w.steps_ahead = onset - w.first_step;
      out.push_back(std::move(w));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const EarlyWarning& a, const EarlyWarning& b) {
    return a.steps_ahead != b.steps_ahead ? a.steps_ahead > b.steps_ahead : a.score > b.score;
  });
  return out;
}

}  // namespace fp8scope::insight
