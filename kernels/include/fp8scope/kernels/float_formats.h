// The low-precision float formats fp8scope casts to or reads scales in, one constexpr row each (the
// LLVM fltSemantics pattern). Each row declares only the bit layout, the bias, how non-finite values
// are encoded and what a cast of NaN writes; every limit and mask is derived from it and checked
// against the literal numbers in DESIGN.md below, so a typo in a row cannot pass silently.
//
// Sources: OCP 8-bit Floating Point Specification (OFP8) rev 1.0 for E4M3/E5M2; OCP Microscaling
// Formats (MX) v1.0 for E2M1 and the E8M0 scale; cuda_fp8.hpp and cuda_fp4.hpp for what a cast of
// NaN produces (0x7F for both FP8 formats, the sign dropped; +6, code 0x7, for E2M1, which has no
// NaN); cuBLASLt's CUDA_R_8F_UE4M3 (NVFP4's block scale) is E4M3 without its sign bit. The FNUZ
// variants (AMD's, PyTorch's float8_e4m3fnuz/e5m2fnuz, safetensors' F8_E4M3FNUZ/F8_E5M2FNUZ; the
// Graphcore proposal "8-bit Numerical Formats for Deep Neural Networks", arXiv:2206.02915) keep the
// bit layout with a bias one larger, no Inf and no negative zero: 0x80 is their only NaN. fp8scope
// reads them (checkpoints) and never casts to them.
#pragma once

#include <cstdint>

#include "fp8scope/kernels/host_device.h"

namespace fp8scope {

enum class NonFiniteEncoding : std::uint8_t {
  kIeee,           // all-ones exponent: mantissa 0 is Inf, any other mantissa NaN (E5M2)
  kFiniteNanOnly,  // "fn": no Inf; only all-ones exponent and mantissa is NaN (E4M3, UE4M3)
  kFiniteOnly,     // no Inf and no NaN: every code is a number (E2M1)
  kExponentOnly,   // no mantissa, no zero; the all-ones code is NaN (E8M0 scale)
  kNegativeZeroNan,  // "fnuz": no Inf, no -0; the negative-zero code is the only NaN
};

struct FloatFormat {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  bool has_sign;
  int bias;
  NonFiniteEncoding non_finite;
  std::uint8_t nan_code;  // what a cast of NaN produces (for kFiniteOnly: +max, as cuda_fp4.h casts)
};

inline constexpr FloatFormat kE4M3{"e4m3", 4, 3, true, 7, NonFiniteEncoding::kFiniteNanOnly, 0x7F};
inline constexpr FloatFormat kE5M2{"e5m2", 5, 2, true, 15, NonFiniteEncoding::kIeee, 0x7F};
inline constexpr FloatFormat kE2M1{"e2m1", 2, 1, true, 1, NonFiniteEncoding::kFiniteOnly, 0x7};
inline constexpr FloatFormat kUE4M3{"ue4m3", 4, 3, false, 7, NonFiniteEncoding::kFiniteNanOnly, 0x7F};
inline constexpr FloatFormat kE8M0{"e8m0", 8, 0, false, 127, NonFiniteEncoding::kExponentOnly, 0xFF};
inline constexpr FloatFormat kE4M3Fnuz{"e4m3fnuz", 4, 3, true, 8, NonFiniteEncoding::kNegativeZeroNan, 0x80};
inline constexpr FloatFormat kE5M2Fnuz{"e5m2fnuz", 5, 2, true, 16, NonFiniteEncoding::kNegativeZeroNan, 0x80};

// The signed element formats a tensor's codes can be stored in: what a checkpoint's dtype may name.
inline constexpr const FloatFormat* kDataFormats[] = {&kE4M3, &kE5M2, &kE2M1, &kE4M3Fnuz, &kE5M2Fnuz};

// ---- Derived from a row -------------------------------------------------------------------------

constexpr double exact_pow2(int e) {
  double v = 1.0;
  for (; e > 0; --e) v *= 2.0;
  for (; e < 0; ++e) v *= 0.5;
  return v;
}

// Bits of one code, and where a signed format keeps its sign.
constexpr int code_bits(const FloatFormat& f) { return (f.has_sign ? 1 : 0) + f.exponent_bits + f.mantissa_bits; }
constexpr int sign_mask(const FloatFormat& f) { return f.has_sign ? 1 << (f.exponent_bits + f.mantissa_bits) : 0; }
constexpr int magnitude_mask(const FloatFormat& f) { return (1 << (f.exponent_bits + f.mantissa_bits)) - 1; }
constexpr int mantissa_mask(const FloatFormat& f) { return (1 << f.mantissa_bits) - 1; }

// Largest exponent field that encodes a finite number.
constexpr int max_exponent_field(const FloatFormat& f) {
  const int all_ones = (1 << f.exponent_bits) - 1;
  const bool all_ones_finite = f.non_finite == NonFiniteEncoding::kFiniteNanOnly ||
                               f.non_finite == NonFiniteEncoding::kFiniteOnly ||
                               f.non_finite == NonFiniteEncoding::kNegativeZeroNan;
  return all_ones_finite ? all_ones : all_ones - 1;
}

// Largest mantissa field at the largest finite exponent.
constexpr int max_mantissa_field(const FloatFormat& f) {
  if (f.non_finite == NonFiniteEncoding::kFiniteNanOnly) return mantissa_mask(f) - 1;
  if (f.non_finite == NonFiniteEncoding::kExponentOnly) return 0;
  return mantissa_mask(f);
}

// The largest finite magnitude's code (the sign bit clear).
constexpr int max_code(const FloatFormat& f) {
  return (max_exponent_field(f) << f.mantissa_bits) | max_mantissa_field(f);
}

constexpr int min_normal_exponent(const FloatFormat& f) { return 1 - f.bias; }
constexpr int max_exponent(const FloatFormat& f) { return max_exponent_field(f) - f.bias; }

constexpr double max_value(const FloatFormat& f) {
  return (1.0 + max_mantissa_field(f) / exact_pow2(f.mantissa_bits)) * exact_pow2(max_exponent(f));
}
// The smallest positive value: the exponent-only E8M0 has no zero and no subnormals.
constexpr double min_normal(const FloatFormat& f) {
  return f.non_finite == NonFiniteEncoding::kExponentOnly ? exact_pow2(-f.bias) : exact_pow2(min_normal_exponent(f));
}
constexpr double min_subnormal(const FloatFormat& f) {
  return f.non_finite == NonFiniteEncoding::kExponentOnly ? min_normal(f)
                                                          : exact_pow2(min_normal_exponent(f) - f.mantissa_bits);
}

constexpr bool has_inf(const FloatFormat& f) { return f.non_finite == NonFiniteEncoding::kIeee; }
constexpr bool has_nan(const FloatFormat& f) { return f.non_finite != NonFiniteEncoding::kFiniteOnly; }
constexpr int inf_code(const FloatFormat& f) {
  return (max_exponent_field(f) + 1) << f.mantissa_bits;  // meaningful only when has_inf(f)
}

// The numbers DESIGN.md promises, checked against the derivation.
static_assert(max_value(kE4M3) == 448.0 && min_normal(kE4M3) == 0x1p-6 &&
              min_subnormal(kE4M3) == 0x1p-9 && max_code(kE4M3) == 0x7E && code_bits(kE4M3) == 8);
static_assert(max_value(kE5M2) == 57344.0 && min_normal(kE5M2) == 0x1p-14 &&
              min_subnormal(kE5M2) == 0x1p-16 && max_code(kE5M2) == 0x7B &&
              inf_code(kE5M2) == 0x7C);
static_assert(max_value(kE2M1) == 6.0 && min_normal(kE2M1) == 1.0 && min_subnormal(kE2M1) == 0.5 &&
              max_code(kE2M1) == 0x7 && code_bits(kE2M1) == 4 && sign_mask(kE2M1) == 0x8 && !has_nan(kE2M1));
static_assert(max_value(kUE4M3) == 448.0 && min_normal(kUE4M3) == 0x1p-6 && min_subnormal(kUE4M3) == 0x1p-9 &&
              max_code(kUE4M3) == 0x7E && code_bits(kUE4M3) == 7 && kUE4M3.nan_code == 0x7F);
static_assert(max_value(kE8M0) == 0x1p127 && min_normal(kE8M0) == 0x1p-127 && max_code(kE8M0) == 0xFE);
static_assert(max_value(kE4M3Fnuz) == 240.0 && min_normal(kE4M3Fnuz) == 0x1p-7 && min_subnormal(kE4M3Fnuz) == 0x1p-10 &&
              max_code(kE4M3Fnuz) == 0x7F && !has_inf(kE4M3Fnuz) && has_nan(kE4M3Fnuz));
static_assert(max_value(kE5M2Fnuz) == 57344.0 && min_normal(kE5M2Fnuz) == 0x1p-15 &&
              min_subnormal(kE5M2Fnuz) == 0x1p-17 && max_code(kE5M2Fnuz) == 0x7F && !has_inf(kE5M2Fnuz));

// The same derivations as plain scalars, which device code may read directly (nvcc allows
// constexpr scalars, not constexpr class objects, in __device__ functions).
template <const FloatFormat& F>
struct FormatConstants {
  static constexpr int kMantissaBits = F.mantissa_bits;
  static constexpr int kBias = F.bias;
  static constexpr int kMinExponent = min_normal_exponent(F);
  static constexpr int kMaxExponent = max_exponent(F);
  static constexpr float kMax = static_cast<float>(max_value(F));
  static constexpr std::uint8_t kMaxCode = static_cast<std::uint8_t>(max_code(F));
  static constexpr std::uint8_t kNanCode = F.nan_code;
  static constexpr std::uint8_t kSignMask = static_cast<std::uint8_t>(sign_mask(F));
  static constexpr std::uint8_t kMagnitudeMask = static_cast<std::uint8_t>(magnitude_mask(F));
  static constexpr bool kHasInf = has_inf(F);
  static constexpr std::uint8_t kInfCode = static_cast<std::uint8_t>(inf_code(F) & magnitude_mask(F));
  static constexpr NonFiniteEncoding kNonFinite = F.non_finite;
};

// The element formats a tensor can be cast to (a recipe's what-if, or a job's own codes), for
// run-time choice: the two FP8 formats and FP4 (NVFP4 and MXFP4 elements).
enum class CastFormat : std::uint8_t { kE4M3 = 1, kE5M2 = 2, kE2M1 = 3 };

inline constexpr CastFormat kAllCastFormats[] = {CastFormat::kE4M3, CastFormat::kE5M2, CastFormat::kE2M1};

constexpr const FloatFormat& format_row(CastFormat f) {
  return f == CastFormat::kE4M3 ? kE4M3 : (f == CastFormat::kE5M2 ? kE5M2 : kE2M1);
}
constexpr const char* format_name(CastFormat f) { return format_row(f).name; }
constexpr float format_max(CastFormat f) { return static_cast<float>(max_value(format_row(f))); }

}  // namespace fp8scope
