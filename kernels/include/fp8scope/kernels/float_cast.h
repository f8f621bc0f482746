// Casts between fp32 and the formats of float_formats.h, written once as templates on a format row
// (the LLVM initFromIEEEAPInt<S> idea) and shared by the CPU and CUDA engines.
//
// Two paths, tested against each other and against cuda_fp8.h / cuda_fp4.h for every BF16 input:
//  - encode()/decode(): bit-exact codes, integer arithmetic, the reference.
//  - round_to_grid(): the value of the nearest-even grid point, two fp32 adds; what the statistics
//    loops use because it vectorizes.
#pragma once

#include <cstdint>
#include <iterator>
#include <utility>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/host_device.h"
#include "fp8scope/kernels/lanes.h"

namespace fp8scope {

enum class Saturation : std::uint8_t {
  kSatFinite,  // out of range and ±Inf become ±max (cvt.rn.satfinite, __NV_SATFINITE)
  kNoSat,      // out of range becomes Inf (E5M2) or NaN (E4M3), as __NV_NOSAT; E2M1, which has
               // neither, always saturates (cuda_fp4.h has no other cast)
};

// What a cast did to one element, as flags (LLVM APFloat's opStatus): the statistics count these.
enum CastFlag : std::uint8_t {
  kCastInexact = 1,    // the value was rounded
  kCastUnderflow = 2,  // a nonzero input became ±0
  kCastOverflow = 4,   // the nearest-even result lies beyond ±max: the cast clipped it
  kCastNaN = 8,        // the input was NaN
  kCastInf = 16,       // the input was ±Inf
};

struct CastResult {
  std::uint8_t code;  // in the low code_bits() bits
  std::uint8_t flags;
};

// fp32 -> code, round to nearest even. NaN becomes the row's NaN code without its sign (for E2M1,
// +max), as cuda_fp8.h and cuda_fp4.h do; a negative input that underflows keeps its sign (-0).
template <const FloatFormat& F>
FP8SCOPE_HD CastResult encode(float x, Saturation sat) {
  static_assert(F.has_sign, "encode() is for the signed data formats; block scales have their own rules");
  static_assert(F.non_finite != NonFiniteEncoding::kNegativeZeroNan, "FNUZ codes are read, never written");
  using C = FormatConstants<F>;
  constexpr int kM = C::kMantissaBits;
  const std::uint32_t u = float_bits(x);
  const auto sign = static_cast<std::uint8_t>((u >> 31) ? C::kSignMask : 0u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  const bool saturate = sat == Saturation::kSatFinite || C::kNonFinite == NonFiniteEncoding::kFiniteOnly;
  const std::uint8_t overflow_code = saturate ? C::kMaxCode : (C::kHasInf ? C::kInfCode : C::kNanCode);

  if (a > 0x7F800000u) return {C::kNanCode, kCastNaN};
  if (a == 0x7F800000u) return {static_cast<std::uint8_t>(sign | overflow_code), kCastInf};
  if (a == 0) return {sign, 0};

  // a = significand * 2^(exponent_field - 150), with the implicit bit made explicit.
  int exponent_field = static_cast<int>(a >> 23);
  std::uint32_t significand = a & 0x7FFFFFu;
  if (exponent_field == 0) {
    exponent_field = 1;
  } else {
    significand |= 0x800000u;
  }
  const int leading = exponent_field - 127;  // exponent of bit 23 of the significand
  const int top = leading < C::kMinExponent ? C::kMinExponent : leading;
  const int dropped = 23 - kM + (top - leading);

  std::uint32_t q = 0;
  bool inexact = true;
  if (dropped < 25) {  // else the input is below half the smallest subnormal: q stays 0
    q = significand >> dropped;
    const std::uint32_t rest = significand & ((1u << dropped) - 1u);
    const std::uint32_t half = 1u << (dropped - 1);
    inexact = rest != 0;
    if (rest > half || (rest == half && (q & 1u))) ++q;
  }

  int exponent = top;
  if (q >> (kM + 1)) {  // rounding carried into the next binade; q is exactly 2^(kM+1)
    q >>= 1;
    ++exponent;
  }
  const int magnitude = (q >> kM) ? ((exponent + C::kBias) << kM) | static_cast<int>(q & ((1u << kM) - 1u))
                                  : static_cast<int>(q);  // subnormal: exponent field 0
  std::uint8_t flags = inexact ? kCastInexact : 0;
  if (q == 0) flags |= kCastUnderflow;
  if (magnitude > C::kMaxCode) {
    return {static_cast<std::uint8_t>(sign | overflow_code),
            static_cast<std::uint8_t>(flags | kCastOverflow | kCastInexact)};
  }
  return {static_cast<std::uint8_t>(sign | magnitude), flags};
}

// code -> fp32, exact (bits above code_bits() are ignored). NaN codes give a quiet NaN.
template <const FloatFormat& F>
FP8SCOPE_HD float decode(std::uint8_t code) {
  static_assert(F.has_sign, "decode() is for the signed data formats; see decode_ue4m3() and decode_e8m0()");
  using C = FormatConstants<F>;
  constexpr int kM = C::kMantissaBits;
  const std::uint32_t sign = (code & C::kSignMask) ? 0x80000000u : 0u;
  const int magnitude = code & C::kMagnitudeMask;
  const int exponent_field = magnitude >> kM;
  const int mantissa = magnitude & ((1 << kM) - 1);
  if (C::kNonFinite == NonFiniteEncoding::kNegativeZeroNan && magnitude == 0 && sign != 0) return bits_float(0x7FC00000u);
  if (magnitude > C::kMaxCode) {
    if (C::kHasInf && magnitude == C::kInfCode) return bits_float(sign | 0x7F800000u);
    return bits_float(0x7FC00000u);
  }
  if (exponent_field == 0) {  // subnormal or zero: mantissa * 2^(min exponent - kM), exact in fp32
    const float unit = bits_float(static_cast<std::uint32_t>(127 + C::kMinExponent - kM) << 23);
    return bits_float(float_bits(static_cast<float>(mantissa) * unit) | sign);
  }
  return bits_float(sign | (static_cast<std::uint32_t>(exponent_field - C::kBias + 127) << 23) |
                    (static_cast<std::uint32_t>(mantissa) << (23 - kM)));
}

namespace detail {
template <std::size_t... I>
float decode_data_format(const FloatFormat& f, std::uint8_t code, std::index_sequence<I...>) {
  float v = bits_float(0x7FC00000u);
  (void)((&f == kDataFormats[I] ? (v = decode<*kDataFormats[I]>(code), true) : false) || ...);
  return v;
}
}  // namespace detail

// decode<F> for one of kDataFormats chosen at run time (host code: a checkpoint's dtype); NaN for
// any other row.
inline float decode_as(const FloatFormat& f, std::uint8_t code) {
  return detail::decode_data_format(f, code, std::make_index_sequence<std::size(kDataFormats)>());
}

// |y| rounded to the nearest-even point of F's grid, the exponent range left open above so a value
// past max rounds to a point beyond it and the caller sees the overflow. Adding c, a power of two
// whose fp32 last place is the grid's spacing at |y|, makes the fp32 adder do the rounding.
// Equals |decode(encode(y, kNoSat))| wherever that is finite. V is a lane type (lanes.h).
template <const FloatFormat& F, class V>
FP8SCOPE_HD V round_to_grid(V abs_y) {
  using C = FormatConstants<F>;
  using L = Lanes<V>;
  using Bits = typename L::Bits;
  constexpr std::uint32_t kLow = 127 + C::kMinExponent;   // subnormals share this spacing
  constexpr std::uint32_t kHigh = 128 + C::kMaxExponent;  // past max: already an overflow
  Bits e = L::to_bits(abs_y) >> 23;
  e = e < kLow ? splat<Bits>(kLow) : (e > kHigh ? splat<Bits>(kHigh) : e);
  const V c = L::from_bits((e + (23 - C::kMantissaBits)) << 23);
  return add_rn(add_rn(abs_y, c), -c);
}

// ---- E8M0 block scales (MXFP8, MXFP4) -----------------------------------------------------------

// TE's float_to_e8m0 (transformer_engine/common/util/ptx_arch_spec.cuh:72, TE main of 2026-08-22;
// the cvt.rp.satfinite.ue8m0x2.f32 of Blackwell and its software twin): the biased exponent of v
// rounded up, saturating at 0xFE; NaN -> 0xFF, 0 -> 0. v is nonnegative (an amax times 1/fmax).
// Written without early returns so the CPU engine's loop over a segment's blocks vectorizes.
FP8SCOPE_HD std::uint8_t e8m0_round_up(float v) {
  const std::uint32_t u = float_bits(v) & 0x7FFFFFFFu;
  const std::uint32_t exponent = u >> 23;
  const std::uint32_t mantissa = u & 0x7FFFFFu;
  // An fp32 subnormal at or below 2^-127 rounds up to 2^-127 (code 0), not 2^-126.
  const bool up = (mantissa > 0) & (exponent != 0xFE) & !((exponent == 0) & (mantissa <= 0x400000u));
  std::uint32_t e = exponent + (up ? 1u : 0u);
  e = u == 0x7F800000u ? 0xFEu : e;  // Inf saturates
  e = u > 0x7F800000u ? 0xFFu : e;   // NaN
  return static_cast<std::uint8_t>(e);
}

// E8M0 code -> the scale_inv it encodes, 2^(e-127): TE's ptx::exp2f (ptx.cuh:335, after TE PR
// #3262): code 0 is 2^-127, an fp32 subnormal; 0xFF is NaN.
FP8SCOPE_HD float decode_e8m0(std::uint8_t e) {
  const std::uint32_t bits = e == 0xFF ? 0x7FC00000u : (e == 0 ? 0x00400000u : static_cast<std::uint32_t>(e) << 23);
  return bits_float(bits);
}

// The factor TE multiplies the data by before the cast, 2^(127-e): TE's ptx::exp2f_rcp<float>
// (transformer_engine/common/util/ptx.cuh:309, as TE PR #2647 of Feb 2026 left it). Code 0
// quantizes with 2^127, so a block of tiny values is scaled up rather than flushed (before #2647
// TE used 1 there); code 254 quantizes with 2^-127, which needs an fp32 subnormal; 0xFF (NaN)
// gives NaN.
FP8SCOPE_HD float e8m0_quantize_scale(std::uint8_t e) {
  const std::uint32_t bits = e == 0xFF ? 0x7FFFFFFFu
                                       : (e == 0xFE ? 0x00400000u : static_cast<std::uint32_t>(254 - e) << 23);
  return bits_float(bits);
}

// ---- UE4M3 block scales (NVFP4) ------------------------------------------------------------------

// A nonnegative fp32 -> UE4M3, as TE writes NVFP4 block scales: static_cast<fp8e4m3>(v), the
// round-to-nearest-even satfinite E4M3 cast (transformer_engine/common/cast/nvfp4/core_nvfp4.cuh:
// 67). NaN -> 0x7F.
FP8SCOPE_HD std::uint8_t encode_ue4m3(float v) {
  return static_cast<std::uint8_t>(encode<kE4M3>(v, Saturation::kSatFinite).code & kUE4M3.nan_code);
}

// UE4M3 code -> fp32. A code with bit 7 set is no UE4M3 value: NaN, like 0x7F.
FP8SCOPE_HD float decode_ue4m3(std::uint8_t code) {
  return (code & 0x80u) ? bits_float(0x7FC00000u) : decode<kE4M3>(code);
}

}  // namespace fp8scope
