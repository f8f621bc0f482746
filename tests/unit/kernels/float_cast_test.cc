// The casts against NVIDIA's own host conversions in cuda_fp8.h and cuda_fp4.h: every code decodes
// the same, and every BF16 input times several scales encodes to the same code, in E4M3, E5M2 and
// E2M1, with and without saturation. The fast value path (round_to_grid) must agree with the codes
// everywhere. Block scales: E8M0 and UE4M3 against the same headers.
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_cast.h"

using namespace fp8scope;

namespace {

// Told apart by their fields: comparing the formats' addresses is no constant expression under
// GCC's sanitizers.
template <const FloatFormat& F>
constexpr bool is_fp4() {
  return F.exponent_bits + F.mantissa_bits == 3;
}

template <const FloatFormat& F>
constexpr __nv_fp8_interpretation_t interpretation() {
  return F.exponent_bits == kE4M3.exponent_bits ? __NV_E4M3 : __NV_E5M2;
}

// cuda_fp4.h's cast has no saturation choice: E2M1 always saturates (NaN to +6).
template <const FloatFormat& F>
std::uint8_t cuda_encode(float x, Saturation sat) {
  if constexpr (is_fp4<F>()) {
    return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
  } else {
    return __nv_cvt_float_to_fp8(x, sat == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT, interpretation<F>());
  }
}

template <const FloatFormat& F>
float cuda_decode(std::uint8_t code) {
  if constexpr (is_fp4<F>()) {
    return __half2float(__half(__nv_cvt_fp4_to_halfraw(code, __NV_E2M1)));
  } else {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, interpretation<F>())));
  }
}

bool same_value(float a, float b) { return (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b); }

// Every BF16 bit pattern times each scale, in fp32 as the contract says: y = fp32(x * s).
const float kScales[] = {1.0f, 0.5f, 3.0f, 179.2f, 0x1p-10f, 0x1p20f, 1e-30f, 0x1.fffffep127f};

template <const FloatFormat& F>
void check_all_bf16_inputs() {
  using C = FormatConstants<F>;
  for (float s : kScales) {
    int mismatches = 0;
    for (std::uint32_t h = 0; h < 65536; ++h) {
      const float y = mul_rn(bf16_to_float(static_cast<std::uint16_t>(h)), s);
      for (Saturation sat : {Saturation::kSatFinite, Saturation::kNoSat}) {
        const CastResult ours = encode<F>(y, sat);
        if (ours.code != cuda_encode<F>(y, sat)) ++mismatches;
      }
      // The vectorizable path: the nearest-even grid value, past max exactly when the cast overflows.
      if (!std::isfinite(y)) continue;
      const CastResult nosat = encode<F>(y, Saturation::kNoSat);
      const float grid = round_to_grid<F>(std::fabs(y));
      if (nosat.flags & kCastOverflow) {
        if (!(grid > C::kMax)) ++mismatches;
      } else if (float_bits(std::fabs(decode<F>(nosat.code))) != float_bits(grid)) {
        ++mismatches;
      }
    }
    INFO(F.name << " scale " << s);
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("every code decodes as cuda_fp8.h and cuda_fp4.h decode it", "[float_cast]") {
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    CHECK(same_value(decode<kE4M3>(static_cast<std::uint8_t>(c)), cuda_decode<kE4M3>(static_cast<std::uint8_t>(c))));
    CHECK(same_value(decode<kE5M2>(static_cast<std::uint8_t>(c)), cuda_decode<kE5M2>(static_cast<std::uint8_t>(c))));
  }
  for (int c = 0; c < 16; ++c) {
    INFO("e2m1 code " << c);
    CHECK(same_value(decode<kE2M1>(static_cast<std::uint8_t>(c)), cuda_decode<kE2M1>(static_cast<std::uint8_t>(c))));
  }
}

TEST_CASE("every BF16 input times several scales encodes as cuda_fp8.h does: E4M3", "[float_cast]") {
  check_all_bf16_inputs<kE4M3>();
}

TEST_CASE("every BF16 input times several scales encodes as cuda_fp8.h does: E5M2", "[float_cast]") {
  check_all_bf16_inputs<kE5M2>();
}

TEST_CASE("every BF16 input times several scales encodes as cuda_fp4.h does: E2M1", "[float_cast]") {
  check_all_bf16_inputs<kE2M1>();
}

TEST_CASE("random fp32 inputs encode as cuda_fp8.h and cuda_fp4.h do", "[float_cast]") {
  std::mt19937 rng(20261129);
  std::uniform_int_distribution<std::uint32_t> bits;
  int mismatches = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const float y = bits_float(bits(rng));
    for (Saturation sat : {Saturation::kSatFinite, Saturation::kNoSat}) {
      mismatches += encode<kE4M3>(y, sat).code != cuda_encode<kE4M3>(y, sat);
      mismatches += encode<kE5M2>(y, sat).code != cuda_encode<kE5M2>(y, sat);
      mismatches += encode<kE2M1>(y, sat).code != cuda_encode<kE2M1>(y, sat);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("E4M3 edges, named in hex floats", "[float_cast]") {
  const auto sat = Saturation::kSatFinite;
  const auto nosat = Saturation::kNoSat;
  CHECK(encode<kE4M3>(0x1.cp8f, sat).code == 0x7E);          // 448, the largest finite
  CHECK(encode<kE4M3>(0x1.dp8f, sat).code == 0x7E);          // 464: the tie rounds to even 448
  CHECK(encode<kE4M3>(0x1.dp8f, sat).flags == kCastInexact);  // not an overflow
  CHECK(encode<kE4M3>(0x1.d00002p8f, sat).code == 0x7E);     // just past the tie: clipped
  CHECK((encode<kE4M3>(0x1.d00002p8f, sat).flags & kCastOverflow) != 0);
  CHECK(encode<kE4M3>(0x1.d00002p8f, nosat).code == 0x7F);   // no Inf in E4M3: NaN
  CHECK(encode<kE4M3>(0x1p-6f, sat).code == 0x08);           // smallest normal
  CHECK(encode<kE4M3>(0x1p-9f, sat).code == 0x01);           // smallest subnormal
  CHECK(encode<kE4M3>(0x1p-10f, sat).code == 0x00);          // half of it: ties to even zero
  CHECK(encode<kE4M3>(0x1p-10f, sat).flags == (kCastInexact | kCastUnderflow));
  CHECK(encode<kE4M3>(-0x1p-10f, sat).code == 0x80);         // and keeps its sign
  CHECK(encode<kE4M3>(0x1.000002p-10f, sat).code == 0x01);   // just above half: rounds up
  CHECK(encode<kE4M3>(0x1.8p-9f, sat).code == 0x02);         // 1.5 units: ties to even 2
  CHECK(encode<kE4M3>(NAN, sat).code == 0x7F);
  CHECK(encode<kE4M3>(INFINITY, sat).code == 0x7E);
  CHECK(encode<kE4M3>(-INFINITY, sat).code == 0xFE);
  CHECK(encode<kE4M3>(-INFINITY, nosat).code == 0xFF);
  CHECK(decode<kE4M3>(0x7E) == 448.0f);
  CHECK(decode<kE4M3>(0x01) == 0x1p-9f);
  CHECK(std::isnan(decode<kE4M3>(0xFF)));
}

TEST_CASE("E5M2 edges, named in hex floats", "[float_cast]") {
  const auto sat = Saturation::kSatFinite;
  const auto nosat = Saturation::kNoSat;
  CHECK(encode<kE5M2>(0x1.cp15f, sat).code == 0x7B);          // 57344, the largest finite
  CHECK(encode<kE5M2>(0x1.dffffep15f, sat).code == 0x7B);     // below the tie: rounds down
  CHECK(encode<kE5M2>(0x1.ep15f, nosat).code == 0x7C);        // 61440: the tie rounds to even Inf
  CHECK((encode<kE5M2>(0x1.ep15f, sat).flags & kCastOverflow) != 0);
  CHECK(encode<kE5M2>(0x1p-14f, sat).code == 0x04);           // smallest normal
  CHECK(encode<kE5M2>(0x1p-16f, sat).code == 0x01);           // smallest subnormal
  CHECK(encode<kE5M2>(0x1p-17f, sat).code == 0x00);           // half of it: zero
  CHECK(encode<kE5M2>(INFINITY, nosat).code == 0x7C);
  CHECK(encode<kE5M2>(-INFINITY, nosat).code == 0xFC);
  CHECK(encode<kE5M2>(NAN, nosat).code == 0x7F);
  CHECK(std::isinf(decode<kE5M2>(0x7C)));
  CHECK(std::isnan(decode<kE5M2>(0x7D)));
  CHECK(decode<kE5M2>(0x01) == 0x1p-16f);
}

TEST_CASE("E2M1 edges, named in hex floats", "[float_cast]") {
  const auto sat = Saturation::kSatFinite;
  CHECK(encode<kE2M1>(0x1.8p2f, sat).code == 0x7);            // 6, the largest
  CHECK(encode<kE2M1>(0x1.cp2f, sat).code == 0x7);            // 7: the tie between 6 and 8 rounds to
  CHECK((encode<kE2M1>(0x1.cp2f, sat).flags & kCastOverflow) != 0);  // even 8, past max: clipped
  CHECK(encode<kE2M1>(0x1.bffffep2f, sat).flags == kCastInexact);    // just below: 6, no overflow
  CHECK(encode<kE2M1>(0x1p0f, sat).code == 0x2);              // 1, the smallest normal
  CHECK(encode<kE2M1>(0x1p-1f, sat).code == 0x1);             // 0.5, the only subnormal
  CHECK(encode<kE2M1>(0x1p-2f, sat).code == 0x0);             // half of it: ties to even zero
  CHECK(encode<kE2M1>(0x1p-2f, sat).flags == (kCastInexact | kCastUnderflow));
  CHECK(encode<kE2M1>(-0x1p-2f, sat).code == 0x8);            // and keeps its sign
  CHECK(encode<kE2M1>(0x1.8p-1f, sat).code == 0x2);           // 0.75: ties to even 1
  CHECK(encode<kE2M1>(0x1.4p1f, sat).code == 0x4);            // 2.5: ties to even 2
  CHECK(encode<kE2M1>(NAN, sat).code == 0x7);                 // no NaN in E2M1: +max
  CHECK(encode<kE2M1>(-INFINITY, Saturation::kNoSat).code == 0xF);  // E2M1 saturates regardless
  CHECK(decode<kE2M1>(0x7) == 6.0f);
  CHECK(decode<kE2M1>(0xF) == -6.0f);
  CHECK(decode<kE2M1>(0x1) == 0.5f);
  CHECK(decode<kE2M1>(0x8) == 0.0f);
  CHECK(std::signbit(decode<kE2M1>(0x8)));
}

// FNUZ (arXiv:2206.02915, PyTorch's float8_e4m3fnuz/e5m2fnuz): OCP's bit layout with a bias one
// larger, every exponent finite, no -0: 0x80 is the only NaN. cuda_fp8.h has no FNUZ type, so the
// reference is the definition in fp64.
double fnuz_reference(int code, int mantissa_bits, int bias) {
  if (code == 0x80) return std::nan("");
  const int m = code & 0x7F, e = m >> mantissa_bits, f = m & ((1 << mantissa_bits) - 1);
  const double magnitude = e == 0 ? std::ldexp(f, 1 - bias - mantissa_bits)
                                  : std::ldexp(1.0 + f / static_cast<double>(1 << mantissa_bits), e - bias);
  return (code & 0x80) ? -magnitude : magnitude;
}

TEST_CASE("every FNUZ code decodes as the format defines it, through the row chosen at run time", "[float_cast][fnuz]") {
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    CHECK(same_value(decode_as(kE4M3Fnuz, static_cast<std::uint8_t>(c)), static_cast<float>(fnuz_reference(c, 3, 8))));
    CHECK(same_value(decode_as(kE5M2Fnuz, static_cast<std::uint8_t>(c)), static_cast<float>(fnuz_reference(c, 2, 16))));
    // The OCP rows through the same door are decode<F>'s.
    CHECK(same_value(decode_as(kE4M3, static_cast<std::uint8_t>(c)), decode<kE4M3>(static_cast<std::uint8_t>(c))));
    CHECK(same_value(decode_as(kE5M2, static_cast<std::uint8_t>(c)), decode<kE5M2>(static_cast<std::uint8_t>(c))));
  }
  CHECK(decode_as(kE4M3Fnuz, 0x7F) == 240.0f);  // max: every exponent is finite
  CHECK(decode_as(kE4M3Fnuz, 0x01) == 0x1p-10f);
  CHECK(decode_as(kE5M2Fnuz, 0x7F) == 57344.0f);
  CHECK(decode_as(kE5M2Fnuz, 0x01) == 0x1p-17f);
  CHECK(decode_as(kE4M3Fnuz, 0x40) == 0.5f * decode<kE4M3>(0x40));  // the same bits, half the value
  CHECK(std::isnan(decode_as(kUE4M3, 0x10)));  // not a data format: no guess
}

TEST_CASE("UE4M3 block scales encode as cuda_fp8.h's satfinite E4M3 and drop nothing else", "[float_cast][ue4m3]") {
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 0x8000; ++h) {  // every nonnegative BF16, as block amaxes are
    const float v = bf16_to_float(static_cast<std::uint16_t>(h)) * 1.37f;
    if (encode_ue4m3(v) != __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)) ++mismatches;
  }
  CHECK(mismatches == 0);
  for (int c = 0; c < 0x80; ++c) {
    INFO("ue4m3 code " << c);
    CHECK(same_value(decode_ue4m3(static_cast<std::uint8_t>(c)), cuda_decode<kE4M3>(static_cast<std::uint8_t>(c))));
  }
  CHECK(encode_ue4m3(448.0f) == 0x7E);
  CHECK(encode_ue4m3(1e30f) == 0x7E);     // saturates
  CHECK(encode_ue4m3(NAN) == 0x7F);
  CHECK(std::isnan(decode_ue4m3(0x7F)));
  CHECK(std::isnan(decode_ue4m3(0x80)));  // bit 7 is no part of a UE4M3 code
}

TEST_CASE("E8M0 block exponents round up as cuda_fp8.h's cvt.rp.satfinite does", "[fp8_cast][e8m0]") {
  int mismatches = 0;
  auto check = [&](float v) {
    const std::uint8_t ours = e8m0_round_up(v);
    const std::uint8_t cuda = __nv_cvt_float_to_e8m0(v, __NV_SATFINITE, cudaRoundPosInf);
    if (ours != cuda) {
      if (++mismatches < 5) UNSCOPED_INFO("v=" << v << " ours=" << int(ours) << " cuda=" << int(cuda));
    }
  };
  for (std::uint32_t h = 0; h < 0x8000; ++h) check(bf16_to_float(static_cast<std::uint16_t>(h)));
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0x7F800000u);
  for (int i = 0; i < 1'000'000; ++i) check(bits_float(bits(rng)));
  CHECK(mismatches == 0);
  CHECK(e8m0_round_up(1.0f) == 127);
  CHECK(e8m0_round_up(0x1.000002p0f) == 128);
  CHECK(e8m0_round_up(0x1p-127f) == 0);
  CHECK(e8m0_round_up(INFINITY) == 0xFE);
  CHECK(e8m0_round_up(NAN) == 0xFF);
}

TEST_CASE("E8M0 codes decode to 2^(e-127)", "[fp8_cast][e8m0]") {
  for (int e = 0; e < 255; ++e) CHECK(decode_e8m0(static_cast<std::uint8_t>(e)) == std::ldexp(1.0f, e - 127));
  CHECK(std::isnan(decode_e8m0(0xFF)));
  CHECK(e8m0_quantize_scale(127) == 1.0f);
  CHECK(e8m0_quantize_scale(130) == 0.125f);
  CHECK(e8m0_quantize_scale(0) == 0x1p127f);   // TE's exp2f_rcp since PR #2647 (scale_rules_test)
  CHECK(e8m0_quantize_scale(254) == 0x1p-127f);
}
