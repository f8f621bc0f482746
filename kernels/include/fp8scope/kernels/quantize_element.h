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
