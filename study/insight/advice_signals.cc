#include "advice_signals.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "fp8scope/kernels/recipe.h"

namespace fp8scope::insight {

double median_of(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  std::size_t n = 0;
  for (double x : v) {
    if (std::isfinite(x)) sum += x, ++n;
  }
  return n ? sum / static_cast<double>(n) : std::nan("");
}

std::vector<double> series(const std::vector<RecordPoint>* points, StudiedStatistic key) {
  std::vector<double> out;
  if (points != nullptr) {
    for (const RecordPoint& p : *points) out.push_back(statistic(p, key));
  }
  return out;
}

std::vector<const RecordPoint*> points_with_onsets(const TensorRecords& records, const RecipeKey& recipe,
                                                   const std::vector<RecordPoint>& sample) {
  std::vector<const RecordPoint*> points;
  for (const RecordPoint& p : sample) points.push_back(&p);
  if (auto kept = records.onset_points.find(recipe); kept != records.onset_points.end()) {
    for (const RecordPoint& p : kept->second) points.push_back(&p);
    std::sort(points.begin(), points.end(), [](const RecordPoint* a, const RecordPoint* b) { return a->step < b->step; });
  }
  return points;
}

RobustBaseline robust_baseline(const std::vector<double>& values, double floor) {
  constexpr double kMadToSigma = 1.4826;
  const double center = median_of(values);
  std::vector<double> deviations;
  for (double v : values) deviations.push_back(std::fabs(v - center));
  return {center, std::max(kMadToSigma * median_of(deviations), floor)};
}

// Every signal the advice reads has a row (advice_test checks kAdviceSignals against the table);
// one without would raise no concern.
const Levels& levels(const char* signal, bool fp4) {
  static constexpr Levels kNoConcern{0, HUGE_VAL, HUGE_VAL};
  for (const Threshold& t : advice_thresholds()) {
    if (std::string(t.signal) == signal) return fp4 ? t.fp4 : t.fp8;
  }
  return kNoConcern;
}

double level(const Levels& t, double v) {
  if (!std::isfinite(v)) return 0.0;
  const double to_concern = (v - t.fine) / (t.concern - t.fine);
  if (to_concern <= 1.0) return std::max(0.0, 0.5 * to_concern);
  return std::min(1.0, 0.5 + 0.5 * (v - t.concern) / (t.severe - t.concern));
}

bool fp4_recipe(RecipeKind kind) { return default_recipe(kind).fp4(); }

bool at_least(const char* signal, double v, bool severe, bool fp4) {
  const Levels& t = levels(signal, fp4);
  if (!std::isfinite(v)) return false;
  const double bar = severe ? t.severe : t.concern;
  return t.severe >= t.concern ? v >= bar : v <= bar;
}

}  // namespace fp8scope::insight
