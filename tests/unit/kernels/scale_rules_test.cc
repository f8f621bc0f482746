// TE's scale rules, edge by edge (transformer_engine/common/recipe/*.cu{h}, cast/mxfp8, cast/nvfp4,
// util/ptx.cuh; TE main of 2026-08-22).
#include "fp8scope/kernels/scale_rules.h"

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
    CHECK(mx_block_exponent(amax, rcp) == expected);
  }
  CHECK(mx_block_exponent(0.0f, rcp) == 0);
  CHECK(mx_block_exponent(INFINITY, rcp) == 0xFE);
}

// TE PR #2647 (Feb 2026) changed what the cast multiplies by at the two ends of the E8M0 range;
// TE's ptx::exp2f_rcp<float> (util/ptx.cuh:309) and ptx::exp2f (ptx.cuh:335) as they are now.
TEST_CASE("MXFP8 edges follow TE after PR #2647: exponent 0 quantizes with 2^127, 254 with 2^-127",
          "[scale_rules][mxfp8]") {
  BlockRule mx;
  mx.kind = BlockRule::kE8M0;
  mx.fmax_reciprocal = 1.0f / 448.0f;
  // A block of values so small that amax / 448 rounds up to code 0 (2^-127): before #2647 TE cast
  // it with scale 1 and flushed it to zero; now it is scaled by 2^127 and survives.
  const float tiny = 0x1p-130f;  // amax * (1/448) is about 2^-138.8, below 2^-127
  const ScalePair tiny_scales = mx_block_scale(mx, tiny);
  CHECK(mx_block_exponent(tiny, mx.fmax_reciprocal) == 0);
  CHECK(tiny_scales.scale == 0x1p127f);
  CHECK(tiny_scales.scale_inv == 0x1p-127f);  // decodes as 2^-127, an fp32 subnormal
  CHECK(encode<kE4M3>(tiny * tiny_scales.scale, Saturation::kSatFinite).code != 0);
  // Code 254, the largest (amax / 448 rounds up past 2^126): the cast multiplies by 2^-127.
  CHECK(e8m0_quantize_scale(254) == 0x1p-127f);
  CHECK(decode_e8m0(254) == 0x1p127f);
  // A block holding Inf takes TE's exponent 0xFE (float_to_e8m0 saturates Inf,
  // util/ptx_arch_spec.cuh:89): the Inf is cast to max, every finite value to its grid point.
  const ScalePair inf_scales = mx_block_scale(mx, INFINITY);
  CHECK(mx_block_exponent(INFINITY, mx.fmax_reciprocal) == 0xFE);
  CHECK(inf_scales.scale == 0x1p-127f);
  CHECK(inf_scales.scale_inv == 0x1p127f);
  // NaN (0xFF) gives NaN both ways.
  CHECK(std::isnan(e8m0_quantize_scale(0xFF)));
  CHECK(std::isnan(decode_e8m0(0xFF)));
  // Everywhere between, the cast scale is the exact reciprocal of the decode scale.
  for (int e = 1; e < 254; ++e) {
    INFO("e8m0 " << e);
    CHECK(e8m0_quantize_scale(static_cast<std::uint8_t>(e)) * decode_e8m0(static_cast<std::uint8_t>(e)) == 1.0f);
  }
}

TEST_CASE("NVFP4's per-tensor encode scale: 448 * 6 / amax, FLT_MAX at most, 1 for 0 and Inf", "[scale_rules][nvfp4]") {
  // cast/nvfp4/core_nvfp4.cuh:82 compute_global_encode_scaling_factor_FP4.
  CHECK(nvfp4_global_encode_scale(2688.0f) == 1.0f);
  CHECK(nvfp4_global_encode_scale(3.0f) == 2688.0f / 3.0f);
  CHECK(nvfp4_global_encode_scale(0.0f) == 1.0f);
  CHECK(nvfp4_global_encode_scale(INFINITY) == 1.0f);
  CHECK(nvfp4_global_encode_scale(0x1p-149f) == kFloatMax);  // 2688 / 2^-149 overflows: FLT_MAX
}

TEST_CASE("NVFP4 block scales: the tensor's amax block gets UE4M3 448, the cast and the decode agree",
          "[scale_rules][nvfp4]") {
  const float amax = 5.25f;
  const BlockRule r = nvfp4_rule(amax);
  // The block holding the tensor's amax: amax * (S_enc / 6) = 448 (up to fp32 rounding) -> 0x7E.
  CHECK(nvfp4_block_scale_code(r, amax) == 0x7E);
  const ScalePair top = nvfp4_block_scale(r, amax);
  // Its amax casts to 6, E2M1's max, and decodes back to amax (TE dequantize_nvfp4.cuh:69).
  const CastResult c = encode<kE2M1>(amax * top.scale, Saturation::kSatFinite);
  CHECK(c.code == 0x7);
  CHECK(decode<kE2M1>(c.code) * top.scale_inv == Approx(amax).epsilon(1e-6));
  // A block at a quarter of the amax: scale code e4m3(112) = 0x70, decode 112 * amax / 2688.
  const ScalePair quarter = nvfp4_block_scale(r, amax / 4);
  CHECK(nvfp4_block_scale_code(r, amax / 4) == encode<kE4M3>(112.0f, Saturation::kSatFinite).code);
  CHECK(quarter.scale_inv == 112.0f * amax * (1.0f / 2688.0f));
  // An all-zero block: scale code 0, the cast multiplier 1/0 -> FLT_MAX (quantize_transpose_nvfp4
  // .cuh:549), and everything stays zero.
  CHECK(nvfp4_block_scale_code(r, 0.0f) == 0);
  CHECK(nvfp4_block_scale(r, 0.0f).scale == kFloatMax);
  CHECK(nvfp4_block_scale(r, 0.0f).scale_inv == 0.0f);
}

TEST_CASE("TE's amax keeps Inf", "[scale_rules]") {
  CHECK(te_amax(3.0f, false) == 3.0f);
  CHECK(std::isinf(te_amax(3.0f, true)));
}
