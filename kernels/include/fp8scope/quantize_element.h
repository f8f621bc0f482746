// The per-element step of every engine: scale, cast with satfinite, dequantize, classify. The CPU
// loops and the CUDA kernels both call this, so the two engines cannot disagree on what an
// underflow or an overflow is.
#pragma once

#include <cstdint>

#include "fp8scope/fp8_cast.h"
#include "fp8scope/host_device.h"
#include "fp8scope/stats.h"

namespace fp8scope {

struct QuantizedElement {
  float dequantized;  // x̂ = fp32(Q(fp32(x*s))) * scale_inv, sign kept (so -tiny -> -0)
  float abs_scaled;   // |fp32(x*s)|, what the histogram bins
  bool underflow;     // x != 0 but Q == 0
  bool overflow;      // the nearest-even result was beyond ±max and got clipped
  bool saturated;     // Q == ±max
};

// x must be finite for the flags to mean anything; callers mask NaN and Inf, which are counted
// apart. A finite x whose product with s overflows fp32 is an overflow like any other.
template <const FloatFormat& F>
FP8SCOPE_HD QuantizedElement quantize_element(float x, float scale, float scale_inv) {
  using C = FormatConstants<F>;
  const float y = mul_rn(x, scale);
  const std::uint32_t y_bits = float_bits(y);
  const float abs_y = bits_float(y_bits & 0x7FFFFFFFu);
  const float rounded = round_to_grid<F>(abs_y);
  const bool overflow = rounded > C::kMax;
  const float q = overflow ? C::kMax : rounded;
  const float signed_q = bits_float(float_bits(q) | (y_bits & 0x80000000u));
  return {mul_rn(signed_q, scale_inv), abs_y, q == 0.0f && x != 0.0f, overflow, q == C::kMax};
}

// Histogram bin of a finite nonzero |x*s|: floor(log2 v) from the exponent bits, clamped to the
// histogram's range (fp32 subnormals land in bin 0).
FP8SCOPE_HD int log2_bin(float abs_value) {
  const int e = static_cast<int>(float_bits(abs_value) >> 23) - 127 - kHistogramMinLog2;
  return e < 0 ? 0 : (e >= kHistogramBins ? kHistogramBins - 1 : e);
}

}  // namespace fp8scope
