// Delayed scaling over a scripted amax series, step by step, against TE's rule worked by hand
// (delayed_scaling.cu): h[0] = amax; a = max(h) or h[0]; s = fmax*2^-margin/a if 0 < a < Inf;
// roll h by -1; h[0] = 0. The window is the current amax and the L-1 before it.
#include "fp8scope/kernels/delayed_scaling.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "fp8scope/kernels/scale_rules.h"

using namespace fp8scope;

namespace {
const std::vector<float> kAmaxSeries = {0.0f, 2.0f, INFINITY, 1.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f};
}

TEST_CASE("max over a history of 4, margin 1", "[delayed_scaling]") {
  Recipe r = default_recipe(RecipeKind::kTensorDelayed);
  r.amax_history_length = 4;
  r.margin = 1.0f;
  DelayedScalingState state(r, CastFormat::kE4M3);
  CHECK(state.scale() == 1.0f);  // TE starts at 1
  // scaled_max = 448 / 2 = 224. Inf holds the scale until it leaves the window three steps later.
  const std::vector<float> expected = {1.0f, 112.0f, 112.0f, 112.0f, 112.0f, 112.0f, 224.0f, 448.0f, 448.0f,
                                       224.0f / 3.0f};
  for (std::size_t step = 0; step < kAmaxSeries.size(); ++step) {
    state.update(kAmaxSeries[step]);
    INFO("step " << step);
    CHECK(state.scale() == expected[step]);
  }
}

TEST_CASE("history contents follow TE's roll", "[delayed_scaling]") {
  Recipe r = default_recipe(RecipeKind::kTensorDelayed);
  r.amax_history_length = 4;
  DelayedScalingState state(r, CastFormat::kE4M3);
  state.update(2.0f);
  state.update(5.0f);
  CHECK(std::vector<float>(state.history().begin(), state.history().end()) == std::vector<float>{0, 0, 2, 5});
  state.update(1.0f);
  state.update(1.0f);
  CHECK(std::vector<float>(state.history().begin(), state.history().end()) == std::vector<float>{0, 5, 1, 1});
}

TEST_CASE("most_recent uses this step's amax alone", "[delayed_scaling]") {
  Recipe r = default_recipe(RecipeKind::kTensorDelayed);
  r.amax_history_length = 4;
  r.amax_algo = AmaxAlgo::kMostRecent;
  DelayedScalingState state(r, CastFormat::kE5M2);
  const std::vector<float> expected = {1.0f,        28672.0f,    28672.0f, 57344.0f, 114688.0f, 114688.0f,
                                       114688.0f,   114688.0f,   114688.0f, 57344.0f / 3.0f};
  for (std::size_t step = 0; step < kAmaxSeries.size(); ++step) {
    state.update(kAmaxSeries[step]);
    INFO("step " << step);
    CHECK(state.scale() == expected[step]);
  }
}

TEST_CASE("a tiny amax gives FLT_MAX, not Inf", "[delayed_scaling]") {
  DelayedScalingState state(default_recipe(RecipeKind::kTensorDelayed), CastFormat::kE4M3);
  state.update(0x1p-149f);
  CHECK(state.scale() == kFloatMax);
}
