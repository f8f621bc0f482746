// The state delayed scaling keeps for one tensor across steps (TE DelayedScaling): an amax history
// and the scale the next cast will use. The daemon keeps one per (run, rank, layer, gemm, operand).
#pragma once

#include <span>
#include <vector>

#include "fp8scope/kernels/recipe.h"

namespace fp8scope {

class DelayedScalingState {
 public:
  // recipe must be valid (see validate()); format is the one the tensor is cast to.
  DelayedScalingState(const Recipe& recipe, CastFormat format);

  // The scale this step's cast uses: 1 before the first update, as in TE.
  float scale() const { return scale_; }

  // Record this step's amax and derive the next scale, in TE's order: h[0] = amax; a = max(h) or
  // h[0]; s = fmax * 2^-margin / a when 0 < a < Inf, else unchanged; roll h by -1; h[0] = 0.
  void update(float amax);

  std::span<const float> history() const { return history_; }

 private:
  std::vector<float> history_;
  AmaxAlgo algo_;
  float scaled_max_;
  float scale_ = 1.0f;
};

}  // namespace fp8scope
