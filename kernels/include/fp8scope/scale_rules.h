// How each recipe turns an amax into a scale, exactly as Transformer Engine does it, shared by the
// CPU and CUDA engines. "scale" multiplies the data before the cast; scale_inv dequantizes.
#pragma once

#include <cmath>
#include <cstdint>

#include "fp8scope/fp8_cast.h"
#include "fp8scope/host_device.h"

namespace fp8scope {

inline constexpr float kFloatMax = 0x1.fffffep127f;

FP8SCOPE_HD bool is_finite(float v) { return (float_bits(v) & 0x7F800000u) != 0x7F800000u; }

// Current scaling, TE transformer_engine/common/recipe/recipe_common.cuh compute_scale_from_amax:
// a = max(amax, eps); s = 1 if a is 0, Inf or NaN, else RN(fmax / a); Inf -> FLT_MAX; optionally
// rounded down to a power of two by clearing the mantissa bits.
FP8SCOPE_HD float current_scale(float amax, float fmax, bool power_of_2, float epsilon) {
  const float a = amax < epsilon ? epsilon : amax;
  const bool usable = (a != 0.0f) & is_finite(a);  // false for 0, Inf and NaN
  float s = fmax / (usable ? a : 1.0f);
  s = is_finite(s) ? s : kFloatMax;  // a finite positive a cannot give NaN
  s = usable ? s : 1.0f;
  return power_of_2 ? bits_float(float_bits(s) & 0xFF800000u) : s;
}

// fmax * 2^-margin in fp32, as TE's delayed scaling computes it (fp8_max * std::pow(2.f, -margin)).
inline float scaled_max(float fmax, float margin) { return fmax * std::pow(2.0f, -margin); }

// Delayed scaling's update, TE transformer_engine/common/recipe/delayed_scaling.cu:
// s' = scaled_max / a when 0 < a < Inf, else the previous scale; Inf -> FLT_MAX.
// scaled_max = fmax * 2^-margin, computed by the caller once per recipe.
FP8SCOPE_HD float delayed_scale(float history_amax, float scaled_max, float previous_scale) {
  float s = (is_finite(history_amax) && history_amax > 0.0f) ? scaled_max / history_amax : previous_scale;
  if (!is_finite(s) && s == s) s = kFloatMax;
  return s;
}

// MXFP8 block scale, TE's cast kernels: the E8M0 exponent of amax * fp32(1/fmax) rounded up. The
// reciprocal is TE's Quantized_Limits::max_norm_rcp, an fp32 constant, not an exact division.
FP8SCOPE_HD std::uint8_t mxfp8_block_exponent(float block_amax, float fmax_reciprocal) {
  return e8m0_round_up(mul_rn(block_amax, fmax_reciprocal));
}

// The amax TE's kernels would feed the rules above: fmaxf over |x| skips NaN but keeps Inf. The
// amax fp8scope reports excludes both; this one decides scales so the what-if matches TE.
FP8SCOPE_HD float te_amax(float finite_amax, bool saw_inf) { return saw_inf ? bits_float(0x7F800000u) : finite_amax; }

}  // namespace fp8scope
