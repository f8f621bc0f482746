// The 8-bit float formats fp8scope quantizes to, one constexpr row each (the LLVM fltSemantics
// pattern). Each row declares only the bit layout, the bias, how non-finite values are encoded and
// the canonical NaN; every limit and mask is derived from it and checked against the literal numbers
// in DESIGN.md below, so a typo in a row cannot pass silently.
//
// Sources: OCP 8-bit Floating Point Specification (OFP8) rev 1.0 for E4M3/E5M2; OCP Microscaling
// Formats (MX) v1.0 for the E8M0 scale; cuda_fp8.hpp for the canonical NaN codes (0x7F for both FP8
// formats, the sign dropped).
#pragma once

#include <cstdint>

#include "fp8scope/host_device.h"

namespace fp8scope {

enum class NonFiniteEncoding : std::uint8_t {
  kIeee,             // all-ones exponent: mantissa 0 is Inf, any other mantissa NaN (E5M2)
  kFiniteNanOnly,    // "fn": no Inf; only all-ones exponent and mantissa is NaN (E4M3)
  kUnsignedNanOnly,  // no sign, no zero; all-ones is NaN (E8M0 scale)
};

struct FloatFormat {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  bool has_sign;
  int bias;
  NonFiniteEncoding non_finite;
  std::uint8_t nan_code;  // what a cast of NaN produces
};

inline constexpr FloatFormat kE4M3{"e4m3", 4, 3, true, 7, NonFiniteEncoding::kFiniteNanOnly, 0x7F};
inline constexpr FloatFormat kE5M2{"e5m2", 5, 2, true, 15, NonFiniteEncoding::kIeee, 0x7F};
inline constexpr FloatFormat kE8M0{"e8m0", 8, 0, false, 127, NonFiniteEncoding::kUnsignedNanOnly,
                                   0xFF};

// ---- Derived from a row -------------------------------------------------------------------------

constexpr double exact_pow2(int e) {
  double v = 1.0;
  for (; e > 0; --e) v *= 2.0;
  for (; e < 0; ++e) v *= 0.5;
  return v;
}

constexpr int mantissa_mask(const FloatFormat& f) { return (1 << f.mantissa_bits) - 1; }

// Largest exponent field that encodes a finite number.
constexpr int max_exponent_field(const FloatFormat& f) {
  const int all_ones = (1 << f.exponent_bits) - 1;
  return f.non_finite == NonFiniteEncoding::kFiniteNanOnly ? all_ones : all_ones - 1;
}

// Largest mantissa field at the largest finite exponent.
constexpr int max_mantissa_field(const FloatFormat& f) {
  if (f.non_finite == NonFiniteEncoding::kFiniteNanOnly) return mantissa_mask(f) - 1;
  if (f.non_finite == NonFiniteEncoding::kUnsignedNanOnly) return 0;
  return mantissa_mask(f);
}

constexpr int max_code(const FloatFormat& f) {
  return (max_exponent_field(f) << f.mantissa_bits) | max_mantissa_field(f);
}

constexpr int min_normal_exponent(const FloatFormat& f) { return 1 - f.bias; }
constexpr int max_exponent(const FloatFormat& f) { return max_exponent_field(f) - f.bias; }

constexpr double max_value(const FloatFormat& f) {
  return (1.0 + max_mantissa_field(f) / exact_pow2(f.mantissa_bits)) * exact_pow2(max_exponent(f));
}
constexpr double min_normal(const FloatFormat& f) { return exact_pow2(min_normal_exponent(f)); }
constexpr double min_subnormal(const FloatFormat& f) {
  return exact_pow2(min_normal_exponent(f) - f.mantissa_bits);
}

constexpr bool has_inf(const FloatFormat& f) { return f.non_finite == NonFiniteEncoding::kIeee; }
constexpr int inf_code(const FloatFormat& f) {
  return (max_exponent_field(f) + 1) << f.mantissa_bits;  // meaningful only when has_inf(f)
}

// The numbers DESIGN.md promises, checked against the derivation.
static_assert(max_value(kE4M3) == 448.0 && min_normal(kE4M3) == 0x1p-6 &&
              min_subnormal(kE4M3) == 0x1p-9 && max_code(kE4M3) == 0x7E);
static_assert(max_value(kE5M2) == 57344.0 && min_normal(kE5M2) == 0x1p-14 &&
              min_subnormal(kE5M2) == 0x1p-16 && max_code(kE5M2) == 0x7B &&
              inf_code(kE5M2) == 0x7C);
static_assert(max_value(kE8M0) == 0x1p127 && max_code(kE8M0) == 0xFE);

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
  static constexpr bool kHasInf = has_inf(F);
  static constexpr std::uint8_t kInfCode = static_cast<std::uint8_t>(inf_code(F) & 0x7F);
  static constexpr NonFiniteEncoding kNonFinite = F.non_finite;
};

// The two FP8 formats a tensor can be quantized to, for run-time choice.
enum class Fp8Format : std::uint8_t { kE4M3 = 1, kE5M2 = 2 };

constexpr const FloatFormat& format_row(Fp8Format f) { return f == Fp8Format::kE4M3 ? kE4M3 : kE5M2; }
constexpr const char* format_name(Fp8Format f) { return format_row(f).name; }
constexpr float format_max(Fp8Format f) { return static_cast<float>(max_value(format_row(f))); }

}  // namespace fp8scope
