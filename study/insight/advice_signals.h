// The figures read from a tensor's series, shared by attribution, the early warnings, the
// per-tensor advice and the recipe ladder, and the levels advice judges them by. Internal to
// fp8scope_insight.
#pragma once

#include <string>
#include <vector>

#include "fp8scope/insight/advice.h"

namespace fp8scope::insight {

// Over the finite values; NaN when there are none.
double median_of(std::vector<double> v);
double mean_of(const std::vector<double>& v);
// A statistic of every point of a series (none for a series not sampled).
std::vector<double> series(const std::vector<RecordPoint>* points, StudiedStatistic key);
// The points of one recipe's series in step order: its sample and, of a thinned series, the
// points kept whole around the loss onsets.
std::vector<const RecordPoint*> points_with_onsets(const TensorRecords& records, const RecipeKey& recipe,
                                                   const std::vector<RecordPoint>& sample);
// A series' normal: the median of its values (finite, at least one) and their spread in robust
// sigmas (1.4826 x the median absolute deviation), never below `floor`.
struct RobustBaseline {
  double center, sigma;
};
RobustBaseline robust_baseline(const std::vector<double>& values, double floor);
// A signal's row of advice_thresholds(), under an FP8 or an FP4 recipe.
const Levels& levels(const char* signal, bool fp4);
// 0 at `fine`, 0.5 at `concern`, 1 at `severe`, linear between; works for both directions.
double level(const Levels& t, double v);
// Whether a recipe casts to FP4, and so is judged by FP4's levels.
bool fp4_recipe(RecipeKind kind);
// Whether v reaches the signal's level of concern (or severe); never for NaN.
bool at_least(const char* signal, double v, bool severe, bool fp4 = false);

}  // namespace fp8scope::insight
