// The figures advice reads from a tensor's series and the levels it judges them by, shared by the
// per-tensor advice and the recipe ladder. Internal to fp8scope_insight.
#pragma once

#include <vector>

#include "fp8scope/insight/advice.h"

namespace fp8scope::insight {

// Over the finite values; NaN when there are none.
double median_of(std::vector<double> v);
double mean_of(const std::vector<double>& v);
// A statistic of every point of a series (none for a series not sampled).
std::vector<double> series(const std::vector<RecordPoint>* points, StudiedStatistic key);
// A signal's row of advice_thresholds(), under an FP8 or an FP4 recipe.
const Levels& levels(const char* signal, bool fp4);
// 0 at `fine`, 0.5 at `concern`, 1 at `severe`, linear between; works for both directions.
double level(const Levels& t, double v);
// Whether v reaches the signal's level of concern (or severe); never for NaN.
bool at_least(const char* signal, double v, bool severe, bool fp4 = false);

}  // namespace fp8scope::insight
