#include "advice_signals.h"

#include <algorithm>
#include <cmath>
#include <string>

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

bool at_least(const char* signal, double v, bool severe, bool fp4) {
  const Levels& t = levels(signal, fp4);
  if (!std::isfinite(v)) return false;
  const double bar = severe ? t.severe : t.concern;
  return t.severe >= t.concern ? v >= bar : v <= bar;
}

}  // namespace fp8scope::insight
