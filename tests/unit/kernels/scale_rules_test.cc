// TE's scale rules, edge by edge (transformer_engine/common/recipe/*.cu{h}).
#include "fp8scope/scale_rules.h"

#include <catch2/catch.hpp>
#include <cmath>

using namespace fp8scope;

TEST_CASE("current scaling: fmax / max(amax, eps), with TE's special cases", "[scale_rules]") {
  CHECK(current_scale(2.0f, 448.0f, false, 0.0f) == 224.0f);
  CHECK(current_scale(3.0f, 448.0f, false, 0.0f) == 448.0f / 3.0f);  // one fp32 division, RN
  CHECK(current_scale(0.0f, 448.0f, false, 0.0f) == 1.0f);
  CHECK(current_scale(INFINITY, 448.0f, false, 0.0f) == 1.0f);
  CHECK(current_scale(NAN, 448.0f, false, 0.0f) == 1.0f);
  CHECK(current_scale(1e-30f, 448.0f, false, 1e-4f) == 448.0f / 1e-4f);  // clamped up to eps
  CHECK(current_scale(0x1p-149f, 448.0f, false, 0.0f) == kFloatMax);      // Inf -> FLT_MAX
  CHECK(current_scale(3.0f, 448.0f, true, 0.0f) == 128.0f);                // 149.33 rounded down to 2^7
  CHECK(current_scale(0x1p-149f, 448.0f, true, 0.0f) == 0x1p127f);
}

TEST_CASE("delayed scaling: scaled_max / amax only for 0 < amax < Inf", "[scale_rules]") {
  CHECK(delayed_scale(2.0f, 224.0f, 7.0f) == 112.0f);
  CHECK(delayed_scale(0.0f, 224.0f, 7.0f) == 7.0f);
  CHECK(delayed_scale(INFINITY, 224.0f, 7.0f) == 7.0f);
  CHECK(delayed_scale(NAN, 224.0f, 7.0f) == 7.0f);
  CHECK(delayed_scale(0x1p-149f, 224.0f, 7.0f) == kFloatMax);
}

TEST_CASE("MXFP8 block exponent: amax * fp32(1/fmax), rounded up to a power of two", "[scale_rules]") {
  const float rcp = 1.0f / 448.0f;
  // Each case against the same rule computed in fp64 from the fp32 product.
  for (float amax : {1.0f, 448.0f, 447.0f, 449.0f, 896.0f, 1e-20f, 3e30f}) {
    const double product = static_cast<double>(amax * rcp);
    const int expected = 127 + static_cast<int>(std::ceil(std::log2(product)));
    INFO("amax " << amax);
    CHECK(mxfp8_block_exponent(amax, rcp) == expected);
  }
  CHECK(mxfp8_block_exponent(0.0f, rcp) == 0);
  CHECK(mxfp8_block_exponent(INFINITY, rcp) == 0xFE);
}

TEST_CASE("TE's amax keeps Inf", "[scale_rules]") {
  CHECK(te_amax(3.0f, false) == 3.0f);
  CHECK(std::isinf(te_amax(3.0f, true)));
}
