// The per-element step of every engine: scale, cast with satfinite, dequantize, classify. The CPU
// engine runs it on SIMD vectors, the CUDA engine on one float per thread (lanes.h), so the two
// cannot disagree on what an underflow or an overflow is.
#pragma once

#include <cstdint>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/host_device.h"
#include "fp8scope/kernels/lanes.h"
#include "fp8scope/kernels/stats.h"

namespace fp8scope {

template <class V>
struct QuantizedElement {
  using Mask = typename Lanes<V>::Mask;
  V dequantized;   // x̂ = fp32(Q(fp32(x*s))) * scale_inv, sign kept (so -tiny -> -0)
  V abs_scaled;    // |fp32(x*s)|, what the histogram bins
  Mask underflow;  // x != 0 but Q == 0
  Mask overflow;   // the nearest-even result was beyond ±max and got clipped
  Mask saturated;  // Q == ±max
};

// x must be finite for the flags to mean anything; callers mask NaN and Inf, which are counted
// apart. A finite x whose product with s overflows fp32 is an overflow like any other.
template <const FloatFormat& F, class V>
FP8SCOPE_HD QuantizedElement<V> quantize_element(V x, V scale, V scale_inv) {
  using C = FormatConstants<F>;
  using L = Lanes<V>;
  using Mask = typename L::Mask;
  const V y = mul_rn(x, scale);
  const auto y_bits = L::to_bits(y);
  const V abs_y = L::from_bits(y_bits & 0x7FFFFFFFu);
  const V rounded = round_to_grid<F>(abs_y);
  const Mask overflow = rounded > C::kMax;
  const V q = overflow ? splat<V>(C::kMax) : rounded;
  const V signed_q = L::from_bits(L::to_bits(q) | (y_bits & 0x80000000u));
  // saturated is written as rounded >= max (the same as q == max) because that form vectorizes.
  return {mul_rn(signed_q, scale_inv), abs_y, Mask((q == 0.0f) & (x != 0.0f)), overflow, Mask(rounded >= C::kMax)};
}

// Stochastic rounding as TE rounds NVFP4 gradients (cvt.rs.satfinite, and its software twin at
// common/util/ptx.cuh:532-547): |y| = |fp32(x*s)| gets u * step added, u = r / 256 for 8 random bits
// r, the sum rounded to fp32 (fmaf; u * step is exact) and floored to the grid; a result past max is
// clipped to max. So between grid points lo <= |y| < hi = lo + step it rounds up in
// p = #{r : fp32(|y| + r step / 256) >= hi} / 256 of the draws: floor(256 (|y| - lo) / step), one
// more when fp32's rounding lifts the largest draw below onto hi. Not ideal stochastic rounding: it
// leans toward zero by up to step / 256. Past max, |y| < max + step floors to max in 1 - p of the
// draws and is clipped in p; from max + step on every draw is clipped. Reported by expectation,
// with no random draw: E[x̂] = x̂_lo + p (x̂_hi - x̂_lo), E[(x - x̂)^2] = (1-p)(x - x̂_lo)^2 + p (x -
// x̂_hi)^2; underflow is the chance of rounding to 0. Same contract as quantize_element.
template <class V>
struct ExpectedElement {
  using Mask = typename Lanes<V>::Mask;
  V low, high;     // x̂ if rounded down or up: fp32(±lo * scale_inv), fp32(±hi * scale_inv); ±max past it
  V p_high;        // the chance x̂ is `high`; 0 on the grid and from max on
  V abs_scaled;    // |fp32(x*s)|, what the histogram bins
  Mask low_zero;   // lo == 0: rounding down flushes x (an underflow when x != 0)
  V p_saturated;   // the chance the code is ±max: p when hi == max, 1 from max on
  V p_overflow;    // the chance the draw lands past max and satfinite clips it
};

template <const FloatFormat& F, class V>
FP8SCOPE_HD ExpectedElement<V> stochastic_element(V x, V scale, V scale_inv) {
  using C = FormatConstants<F>;
  using L = Lanes<V>;
  using Bits = typename L::Bits;
  const V y = mul_rn(x, scale);
  const auto y_bits = L::to_bits(y);
  const V abs_y = L::from_bits(y_bits & 0x7FFFFFFFu);
  // The grid's spacing at |y| (subnormals share the smallest normal binade's, values past max the
  // top binade's), a power of two, so lo, hi, the fraction and every u * step are exact.
  constexpr std::uint32_t kLow = 127 + C::kMinExponent;
  constexpr std::uint32_t kHigh = 128 + C::kMaxExponent;
  Bits e = L::to_bits(abs_y) >> 23;
  e = e < kLow ? splat<Bits>(kLow) : (e > kHigh ? splat<Bits>(kHigh) : e);
  const V step = L::from_bits((e - C::kMantissaBits) << 23);
  const V inv_step = L::from_bits((254u - (e - C::kMantissaBits)) << 23);  // 1 / step, exactly
  const V draw_step = L::from_bits((e - C::kMantissaBits - 8) << 23);       // step / 256
  const V c = L::from_bits((e + (23 - C::kMantissaBits)) << 23);  // round_to_grid's, from the same exponent
  const V nearest = add_rn(add_rn(abs_y, c), -c);
  const V lo = nearest > abs_y ? add_rn(nearest, -step) : nearest;
  const V hi = add_rn(lo, step);
  // floor(256 * fraction), the fraction below 1 so the sum with 2^23 rounds to an integer.
  const V scaled = mul_rn(add_rn(abs_y, -lo), mul_rn(inv_step, splat<V>(256.0f)));
  const V integer = splat<V>(0x1p23f);
  const V near_k = add_rn(add_rn(scaled, integer), -integer);
  const V k = near_k > scaled ? add_rn(near_k, splat<V>(-1.0f)) : near_k;
  const V lifted = add_rn(abs_y, mul_rn(add_rn(splat<V>(255.0f), -k), draw_step));
  const V p = mul_rn(lifted >= hi ? add_rn(k, splat<V>(1.0f)) : k, splat<V>(1.0f / 256.0f));
  const auto at_max = abs_y >= C::kMax;
  const auto past_max = lo > C::kMax;  // from max + step on: every draw is clipped
  const V one = splat<V>(1.0f), zero{};
  const V top = splat<V>(C::kMax);
  const V low = at_max ? top : lo, high = at_max ? top : hi;
  const auto sign = y_bits & 0x80000000u;
  return {mul_rn(L::from_bits(L::to_bits(low) | sign), scale_inv),
          mul_rn(L::from_bits(L::to_bits(high) | sign), scale_inv),
          at_max ? zero : p,
          abs_y,
          typename L::Mask(lo == 0.0f),
          at_max ? one : (hi == C::kMax ? p : zero),
          past_max ? one : (at_max ? p : zero)};
}

// What one finite element x adds to a recipe's sums (QuantStats, or a CUDA kernel's accumulators
// with the same fields): the flags, and the error terms in fp64. The CPU engine's scalar tail and
// the CUDA kernel both call this.
template <class Sums>
FP8SCOPE_HD void add_element(Sums& s, float x, const QuantizedElement<float>& e) {
  s.underflow += e.underflow;
  s.overflow += e.overflow;
  s.saturated += e.saturated;
  const double d = static_cast<double>(x) - e.dequantized;
  s.squared_error += d * d;
  s.dot += static_cast<double>(x) * e.dequantized;
  s.dequant_squares += static_cast<double>(e.dequantized) * e.dequantized;
}

// The expectation of the same, under stochastic rounding. With d = x̂_hi - x̂_lo and m = E[x̂] =
// x̂_lo + p d: E[(x - x̂)^2] = (x - x̂_lo)^2 - p d (2x - x̂_lo - x̂_hi), E[x̂^2] = x̂_lo^2 + p d (x̂_lo +
// x̂_hi) (the CPU engine's vector loop adds the same forms).
template <class Sums>
FP8SCOPE_HD void add_expected_element(Sums& s, float x, const ExpectedElement<float>& e) {
  const double p = e.p_high, xd = x, lo = e.low, hi = e.high;
  const double pd = p * (hi - lo), sum = lo + hi, dl = xd - lo;
  s.underflow += (e.low_zero && x != 0.0f) ? 1.0 - p : 0.0;
  s.overflow += e.p_overflow;
  s.saturated += e.p_saturated;
  s.squared_error += dl * dl - pd * (xd + xd - sum);
  s.dot += xd * (lo + pd);
  s.dequant_squares += lo * lo + pd * sum;
}

// Histogram bin of a finite nonzero |x*s|: floor(log2 v) from the exponent bits, clamped to the
// histogram's range (fp32 subnormals land in bin 0).
template <class V>
FP8SCOPE_HD typename Lanes<V>::Bits log2_bin(V abs_value) {
  using Bits = typename Lanes<V>::Bits;
  constexpr std::uint32_t kLow = 127 + kHistogramMinLog2;  // biased exponent of bin 0
  constexpr std::uint32_t kHigh = kLow + kHistogramBins - 1;
  Bits e = Lanes<V>::to_bits(abs_value) >> 23;
  e = e < kLow ? splat<Bits>(kLow) : (e > kHigh ? splat<Bits>(kHigh) : e);
  return e - kLow;
}

}  // namespace fp8scope
