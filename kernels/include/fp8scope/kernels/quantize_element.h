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

// Stochastic rounding (TE's NVFP4 gradients, cvt.rs.satfinite): |y| = |fp32(x*s)| between grid
// points lo <= |y| <= hi rounds to hi with probability p = (|y| - lo) / (hi - lo), else to lo; past
// max it is clipped to max. Reported by expectation, with no random draw: E[x̂] = x̂_lo + p (x̂_hi -
// x̂_lo) and E[(x - x̂)^2] = (1-p)(x - x̂_lo)^2 + p (x - x̂_hi)^2 (in the scaled domain the latter is
// (|y| - lo)(hi - |y|)); underflow is the chance of rounding to 0. TE draws 8 random bits an element
// (util/ptx.cuh:532-547), so its p is this one rounded to 1/256. Same contract as quantize_element.
template <class V>
struct ExpectedElement {
  using Mask = typename Lanes<V>::Mask;
  V low, high;     // x̂ if rounded down or up: fp32(±lo * scale_inv), fp32(±hi * scale_inv)
  V p_high;        // the chance of rounding up; 0 on the grid and past max
  V abs_scaled;    // |fp32(x*s)|, what the histogram bins
  Mask low_zero;   // lo == 0: rounding down flushes x (an underflow when x != 0)
  Mask high_max;   // hi == max: rounding up saturates
  Mask overflow;   // |y| > max: clipped to max whichever way it rounds
};

template <const FloatFormat& F, class V>
FP8SCOPE_HD ExpectedElement<V> stochastic_element(V x, V scale, V scale_inv) {
  using C = FormatConstants<F>;
  using L = Lanes<V>;
  using Bits = typename L::Bits;
  const V y = mul_rn(x, scale);
  const auto y_bits = L::to_bits(y);
  const V abs_y = L::from_bits(y_bits & 0x7FFFFFFFu);
  // The grid's spacing at |y| (subnormals share the smallest normal binade's), a power of two, so
  // lo, hi and p are exact.
  constexpr std::uint32_t kLow = 127 + C::kMinExponent;
  constexpr std::uint32_t kHigh = 128 + C::kMaxExponent;
  Bits e = L::to_bits(abs_y) >> 23;
  e = e < kLow ? splat<Bits>(kLow) : (e > kHigh ? splat<Bits>(kHigh) : e);
  const V step = L::from_bits((e - C::kMantissaBits) << 23);
  const V inv_step = L::from_bits((254u - (e - C::kMantissaBits)) << 23);  // 1 / step, exactly
  const V c = L::from_bits((e + (23 - C::kMantissaBits)) << 23);  // round_to_grid's, from the same exponent
  const V nearest = add_rn(add_rn(abs_y, c), -c);
  const auto beyond = abs_y >= C::kMax;
  V lo = nearest > abs_y ? add_rn(nearest, -step) : nearest;
  lo = beyond ? splat<V>(C::kMax) : lo;
  const V hi = beyond ? lo : add_rn(lo, step);
  const V p = beyond ? V{} : mul_rn(add_rn(abs_y, -lo), inv_step);
  const auto sign = y_bits & 0x80000000u;
  return {mul_rn(L::from_bits(L::to_bits(lo) | sign), scale_inv),
          mul_rn(L::from_bits(L::to_bits(hi) | sign), scale_inv),
          p,
          abs_y,
          typename L::Mask(lo == 0.0f),
          typename L::Mask(hi >= C::kMax),
          typename L::Mask(abs_y > C::kMax)};
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
  s.overflow += e.overflow ? 1.0 : 0.0;
  s.saturated += e.high_max ? (e.low == e.high ? 1.0 : p) : 0.0;
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
