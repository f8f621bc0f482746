// How each recipe turns an amax into a scale, exactly as Transformer Engine does it, shared by the
// CPU and CUDA engines. "scale" multiplies the data before the cast; scale_inv dequantizes.
// TE citations are to its main branch of 2026-08-22 (d0067d0).
#pragma once

#include <cmath>
#include <cstdint>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/host_device.h"
#include "fp8scope/kernels/quantize_element.h"

namespace fp8scope {

inline constexpr float kFloatMax = 0x1.fffffep127f;

FP8SCOPE_HD bool is_finite(float v) { return (float_bits(v) & 0x7F800000u) != 0x7F800000u; }
FP8SCOPE_HD float fmin_f(float a, float b) { return (a < b || b != b) ? a : b; }  // fminf: NaN loses

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

// MX block scale (MXFP8, and MXFP4 by the same rule), TE's cast kernels
// (cast/mxfp8/quantize_mxfp8.cuh:270): the E8M0 exponent of amax * fp32(1/fmax) rounded up. The
// reciprocal is TE's Quantized_Limits::max_norm_rcp, an fp32 constant, not an exact division.
FP8SCOPE_HD std::uint8_t mx_block_exponent(float block_amax, float fmax_reciprocal) {
  return e8m0_round_up(mul_rn(block_amax, fmax_reciprocal));
}

// The amax TE's kernels would feed the rules above: fmaxf over |x| skips NaN but keeps Inf. The
// amax fp8scope reports excludes both; this one decides scales so the what-if matches TE.
FP8SCOPE_HD float te_amax(float finite_amax, bool saw_inf) { return saw_inf ? bits_float(0x7F800000u) : finite_amax; }

// ---- NVFP4's two levels (TE NVFP4BlockScaling) --------------------------------------------------

inline constexpr float kNvfp4ScaleMax = 448.0f;  // the UE4M3 block scale's max (TE's default E4M3_MAX)
inline constexpr float kNvfp4ElementMax = 6.0f;  // E2M1's max
// 4over6's E4M3_MAX, the bound its per-tensor scale maps the amax to (TE d0067d0,
// nvfp4_4over6_e4m3_use_256 = "all" by default: common/recipe/__init__.py:565): a block mapped to 4
// then needs up to 1.5 x 256 = 384 < 448, so its scale is never clipped.
inline constexpr float kNvfp4FourOverSixScaleMax = 256.0f;

// The per-tensor encode scale, TE compute_global_encode_scaling_factor_FP4 (cast/nvfp4/
// core_nvfp4.cuh:81-95): fminf(E4M3_MAX * 6 / amax, FLT_MAX), and 1 when amax is 0 or Inf.
FP8SCOPE_HD float nvfp4_global_encode_scale(float tensor_amax, float e4m3_max = kNvfp4ScaleMax) {
  const float s = fmin_f(e4m3_max * kNvfp4ElementMax / tensor_amax, kFloatMax);
  return (tensor_amax == 0.0f || s == 0.0f) ? 1.0f : s;
}

// ---- Every block rule, in one place -------------------------------------------------------------

struct ScalePair {
  float scale, scale_inv;
};

// How a spec's blocks get their scales. Fixed once the tensor's amax is known (NVFP4 needs it), so
// the per-block work is the block amax alone.
struct BlockRule {
  enum Kind : std::uint8_t { kCurrent, kE8M0, kNvfp4, kNvfp4FourOverSix } kind = kCurrent;
  float numerator = 448.0f;    // kCurrent: fmax * 2^-margin
  bool power_of_2 = false;     // kCurrent
  float epsilon = 0.0f;        // kCurrent
  float fmax_reciprocal = 0;   // kE8M0: TE's max_norm_rcp of the element format
  float global_encode = 1.0f;  // kNvfp4*: S_enc
  float global_decode = 1.0f;  // kNvfp4*: S_dec = fp32(1 / S_enc)
  float tensor_amax = 0.0f;    // kNvfp4*: the amax TE's dequantization multiplies by (row-scaled: the row's)
};

// NVFP4's rule under an amax: the tensor's, or one row's for row-scaled NVFP4, whose rows take the
// same compute_global_encode_scaling_factor_FP4 of their own amax (TE d0067d0, cast/nvfp4/
// specialized/quantize_transpose_nvfp4_tuned_1D.cuh:326-328) and dequantize with it
// (dequantize_nvfp4.cuh:66-69). TE computes S_dec = 1.0 / S_enc in double
// (quantize_transpose_nvfp4.cuh:430); rounded to fp32 that is the fp32 quotient.
FP8SCOPE_HD BlockRule nvfp4_rule(float amax) {
  BlockRule r;
  r.kind = BlockRule::kNvfp4;
  r.global_encode = nvfp4_global_encode_scale(amax);
  r.global_decode = static_cast<float>(1.0 / static_cast<double>(r.global_encode));
  r.tensor_amax = amax;
  return r;
}

// 4over6's rule: the per-tensor scale from 256, and S_dec = 1.0f / S_enc in fp32 (TE d0067d0,
// cast/nvfp4/quantize_4over6_nvfp4.cuh:139).
FP8SCOPE_HD BlockRule nvfp4_four_over_six_rule(float amax) {
  BlockRule r;
  r.kind = BlockRule::kNvfp4FourOverSix;
  r.global_encode = nvfp4_global_encode_scale(amax, kNvfp4FourOverSixScaleMax);
  r.global_decode = 1.0f / r.global_encode;
  r.tensor_amax = amax;
  return r;
}

FP8SCOPE_HD ScalePair current_block_scale(const BlockRule& r, float block_amax) {
  const float s = current_scale(block_amax, r.numerator, r.power_of_2, r.epsilon);
  return {s, 1.0f / s};
}

// MX: TE multiplies by exp2f_rcp(e) before the cast and the GEMM decodes 2^(e-127).
FP8SCOPE_HD ScalePair mx_block_scale(const BlockRule& r, float block_amax) {
  const std::uint8_t e = mx_block_exponent(block_amax, r.fmax_reciprocal);
  return {e8m0_quantize_scale(e), decode_e8m0(e)};
}

// NVFP4's UE4M3 block scale of a block amax: S_dec_b = e4m3(amax * (S_enc * fp32(1/6)))
// (core_nvfp4.cuh:68).
FP8SCOPE_HD std::uint8_t nvfp4_block_scale_code(const BlockRule& r, float block_amax) {
  return encode_ue4m3(mul_rn(block_amax, mul_rn(r.global_encode, 1.0f / kNvfp4ElementMax)));
}

// NVFP4: the cast multiplies by fminf(1 / (S_dec_b * S_dec), FLT_MAX) (cast/nvfp4/
// quantize_transpose_nvfp4.cuh:549); dequantization is q * (S_dec_b * amax * fp32(1/(6 * 448)))
// (cast/nvfp4/dequantize_nvfp4.cuh:69).
FP8SCOPE_HD ScalePair nvfp4_block_scale(const BlockRule& r, float block_amax) {
  const float block_decode = decode_ue4m3(nvfp4_block_scale_code(r, block_amax));
  const float scale = fmin_f(1.0f / mul_rn(block_decode, r.global_decode), kFloatMax);
  const float factor_inv = 1.0f / (kNvfp4ElementMax * kNvfp4ScaleMax);
  return {scale, mul_rn(mul_rn(block_decode, r.tensor_amax), factor_inv)};
}

// ---- NVFP4 4over6 (TE PR #2972; TE d0067d0, cast/nvfp4/quantize_4over6_nvfp4.cuh) --------------

// A block's two candidates: its amax mapped to 6 (NVFP4's usual scale) and to 4 (a scale 1.5x
// larger, so the block's largest elements land near 4, where E2M1's grid is finer relative to
// them). compute_scale_pair (:125-146): base = fp32(amax / 6) * S_enc, then each code
// e4m3(fminf(base * {1.5, 1}, 448)), cast multiplier fminf(1 / (code * S_dec), FLT_MAX); the GEMM
// decodes q * (code * amax * fp32(1 / (6 * 256))) (dequantize_nvfp4.cuh:68-69).
struct FourOverSixCandidates {
  ScalePair map4, map6;
  float code4, code6;  // the UE4M3 block scales' values
};

FP8SCOPE_HD ScalePair nvfp4_four_over_six_pair(const BlockRule& r, float code) {
  const float factor_inv = 1.0f / (kNvfp4ElementMax * kNvfp4FourOverSixScaleMax);
  return {fmin_f(1.0f / mul_rn(code, r.global_decode), kFloatMax), mul_rn(mul_rn(code, r.tensor_amax), factor_inv)};
}

// The codes' values are the nearest-even UE4M3 points of values already clipped to 448:
// round_to_grid, which vectorizes, equals decode(encode()) there (float_cast_test).
FP8SCOPE_HD FourOverSixCandidates four_over_six_candidates(const BlockRule& r, float block_amax) {
  const float base = mul_rn(block_amax / kNvfp4ElementMax, r.global_encode);
  FourOverSixCandidates c;
  c.code4 = round_to_grid<kE4M3>(fmin_f(mul_rn(base, 1.5f), kNvfp4ScaleMax));
  c.code6 = round_to_grid<kE4M3>(fmin_f(base, kNvfp4ScaleMax));
  c.map4 = nvfp4_four_over_six_pair(r, c.code4);
  c.map6 = nvfp4_four_over_six_pair(r, c.code6);
  return c;
}

// One element's error under a candidate, TE's default criterion (MAE, nvfp4_4over6_err_mode; the
// exact path, NVTE_NVFP4_4OVER6_ERR_USE_FAST_MATH unset): accumulate_dequant_error (:190-202),
// |fp32(fp32(q * code) * amax) / (6 * 256) - x| in the input's own units, q the E2M1 cast of x.
// TE sums a block's 16 errors in element order in fp32 (:326-343) and keeps map4 only when its sum
// is strictly smaller (:494-496): a tie, or a NaN from a NaN or Inf element, keeps map6.
template <class V>
FP8SCOPE_HD V four_over_six_error(V x, V scale, V code, float tensor_amax) {
  using L = Lanes<V>;
  const V q = quantize_element<kE2M1>(x, scale, splat<V>(1.0f)).dequantized;  // signed E2M1 value
  const V dequant = mul_rn(mul_rn(q, code), splat<V>(tensor_amax)) / splat<V>(kNvfp4ElementMax * kNvfp4FourOverSixScaleMax);
  return L::from_bits(L::to_bits(add_rn(dequant, -x)) & 0x7FFFFFFFu);
}

// A 16x16 weight block's error, TE's order: each of its 16 rows (or columns) summed in element
// order, then the 16 sums pairwise at distances 8, 4, 2, 1 (the warp's __shfl_down_sync,
// :347-356). Rows past the tensor's end add 0 (TE refuses such shapes).
FP8SCOPE_HD float tree_sum16(float* v) {
  for (int offset = 8; offset > 0; offset /= 2) {
    for (int i = 0; i < offset; ++i) v[i] = add_rn(v[i], v[i + offset]);
  }
  return v[0];
}

// TE's pick: map4 only when its error is strictly smaller (see four_over_six_error).
FP8SCOPE_HD bool four_over_six_takes_map4(float error4, float error6) { return error4 < error6; }

FP8SCOPE_HD ScalePair four_over_six_pick(const FourOverSixCandidates& c, float error4, float error6) {
  return four_over_six_takes_map4(error4, error6) ? c.map4 : c.map6;
}

// Every rule's scales of a block amax. 4over6 gives its map-to-6 candidate here: its pick needs the
// block's elements too (four_over_six_pick), which every engine path that casts it makes.
FP8SCOPE_HD ScalePair block_scale(const BlockRule& r, float block_amax) {
  switch (r.kind) {
    case BlockRule::kE8M0: return mx_block_scale(r, block_amax);
    case BlockRule::kNvfp4: return nvfp4_block_scale(r, block_amax);
    case BlockRule::kNvfp4FourOverSix: return four_over_six_candidates(r, block_amax).map6;
    case BlockRule::kCurrent: break;
  }
  return current_block_scale(r, block_amax);
}

}  // namespace fp8scope
