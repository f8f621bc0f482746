#include "fp8scope/kernels/delayed_scaling.h"

#include <algorithm>
#include <cmath>

#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope {

DelayedScalingState::DelayedScalingState(const Recipe& recipe, CastFormat format)
    : history_(static_cast<std::size_t>(std::max(recipe.amax_history_length, 1)), 0.0f),
      algo_(recipe.amax_algo),
      scaled_max_(scaled_max(format_max(format), recipe.margin)) {}

void DelayedScalingState::update(float amax) {
  history_[0] = amax;
  float a = history_[0];
  if (algo_ == AmaxAlgo::kMax) {
    a = 0.0f;
    for (float h : history_) a = std::fmax(a, h);  // fmaxf skips NaN, as TE's reduction does
  }
  scale_ = delayed_scale(a, scaled_max_, scale_);
  std::rotate(history_.begin(), history_.begin() + 1, history_.end());
  history_[0] = 0.0f;
}

}  // namespace fp8scope
