// What the tests of NVFP4's options share: a tensor as the BF16 bits an engine reads, and a plan
// that casts it with an FP4 recipe as one operand.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8scope/kernels/hadamard_transform.h"
#include "fp8scope/kernels/recipe_analysis.h"

namespace fp8scope::testing {

inline std::vector<std::uint16_t> bf16_of(const std::vector<float>& x) {
  std::vector<std::uint16_t> b;
  for (float v : x) b.push_back(float_to_bf16(v));
  return b;
}

inline RecipePlan fp4_plan(RecipeKind kind, Operand operand) {
  RecipePlan p;
  p.recipe = default_recipe(kind);
  p.format = CastFormat::kE2M1;
  p.operand = operand;
  return p;
}

}  // namespace fp8scope::testing
