#include "fp8scope/checkpoint/producer_cast.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_cast.h"
#include "row_kernel.h"

namespace fp8scope::checkpoint {
namespace {

// fp32 -> BF16 / F16 bits, round to nearest even (what torch's .to() does).
std::uint16_t bf16_bits(float v) {
  const std::uint32_t u = float_bits(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

std::uint16_t f16_bits(float v) {
  const _Float16 h = static_cast<_Float16>(v);  // the compiler's nearest-even conversion
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

// The conventions' producers cast to the OCP format of the codes' widths (producer_code too):
// codes stored as FNUZ never equal theirs, which the comparison then shows.
const FloatFormat& producer_format(const FloatFormat& codes) {
  if (codes.exponent_bits == kE5M2.exponent_bits && codes.mantissa_bits == kE5M2.mantissa_bits) return kE5M2;
  if (codes.exponent_bits == kE4M3.exponent_bits && codes.mantissa_bits == kE4M3.mantissa_bits) return kE4M3;
  return kE2M1;
}
float fmax_of(const FloatFormat& codes) { return static_cast<float>(max_value(producer_format(codes))); }

std::uint8_t fp8_encode(const FloatFormat& codes, float t) {
  return &producer_format(codes) == &kE5M2 ? encode<kE5M2>(t, Saturation::kSatFinite).code
                                           : encode<kE4M3>(t, Saturation::kSatFinite).code;
}

// The signed value of F's nearest-even, saturated code of t (NaN stays NaN).
template <const FloatFormat& F>
float grid_value(float t) {
  const float g = round_to_grid<F>(std::fabs(t));
  return std::copysign(g > FormatConstants<F>::kMax ? FormatConstants<F>::kMax : g, t);
}

template <const FloatFormat& F>
FP8SCOPE_ROW_KERNEL void grid_values(ProducerCast cast, const float* x, const float* scales, std::int64_t block,
                                     std::int64_t n, float* out) {
  for (std::int64_t c0 = 0; c0 < n; c0 += block) {
    const float s = scales[c0 / block], inv = 1.0f / s;
    const std::int64_t end = std::min(c0 + block, n);
    switch (cast) {
      case ProducerCast::kDivideF32:
      case ProducerCast::kNvfp4:
        for (std::int64_t i = c0; i < end; ++i) out[i] = grid_value<F>(x[i] / s);
        break;
      case ProducerCast::kDivideBf16:  // the quotient rounded to BF16 (nearest even) first
        for (std::int64_t i = c0; i < end; ++i) {
          const std::uint32_t u = float_bits(x[i] / s);
          out[i] = grid_value<F>(bits_float((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u));
        }
        break;
      case ProducerCast::kMxfp4:
        for (std::int64_t i = c0; i < end; ++i) out[i] = grid_value<F>(mul_rn(x[i], inv));
        break;
    }
  }
}

}  // namespace

void producer_values(const QuantizedWeight& w, Convention c, const float* x, const float* scales, std::int64_t block,
                     std::int64_t n, float* out) {
  const ProducerCast cast = convention_info(c).cast;
  const FloatFormat& f = producer_format(*w.codes_format);
  if (&f == &kE4M3) return grid_values<kE4M3>(cast, x, scales, block, n, out);
  if (&f == &kE5M2) return grid_values<kE5M2>(cast, x, scales, block, n, out);
  return grid_values<kE2M1>(cast, x, scales, block, n, out);
}

float nvfp4_scale_2(float tensor_amax) {
  return tensor_amax / static_cast<float>(max_value(kE2M1) * max_value(kUE4M3));
}

ExpectedScale expected_scale(const QuantizedWeight& w, Convention c, float amax, float scale_2) {
  ExpectedScale e;
  switch (w.scale_storage) {
    case ScaleStorage::kUE4M3: {  // block_amax / (6 * scale_2), zero blocks 1.0 (nvfp4_tensor.py:82-91)
      const float v = amax == 0.0f ? 1.0f : amax / mul_rn(6.0f, scale_2);
      e.code = encode_ue4m3(v);
      e.value = mul_rn(decode_ue4m3(static_cast<std::uint8_t>(e.code)), scale_2);
      return e;
    }
    case ScaleStorage::kE8M0: {  // 2^ceil(log2(amax / 6)): triton_kernels downcast_to_mxfp's ROUND_UP
      e.code = e8m0_round_up(amax / 6.0f);
      e.value = decode_e8m0(static_cast<std::uint8_t>(e.code));
      return e;
    }
    case ScaleStorage::kF32:
    case ScaleStorage::kBF16:
    case ScaleStorage::kF16: break;
  }
  // amax / fmax, in fp32 (compressed-tensors helpers.py:86, ModelOpt quant_utils.py:214-231), then
  // rounded to the scale's own dtype. An all-zero block: ModelOpt exports 1.0 (tensor_quantizer.py:838),
  // compressed-tensors the dtype's eps (helpers.py:115-126); DeepSeek does not say.
  float v = amax / fmax_of(*w.codes_format);
  if (amax == 0.0f) {
    if (c == Convention::kModelOptFp8) v = 1.0f;
    if (c == Convention::kCompressedTensorsFp8) {
      v = w.scale_storage == ScaleStorage::kBF16 ? 0x1p-7f : (w.scale_storage == ScaleStorage::kF16 ? 0x1p-10f : 0x1p-23f);
    }
    e.known = c == Convention::kModelOptFp8 || c == Convention::kCompressedTensorsFp8;
  }
  switch (w.scale_storage) {
    case ScaleStorage::kBF16: e.code = bf16_bits(v), e.value = bf16_to_float(static_cast<std::uint16_t>(e.code)); break;
    case ScaleStorage::kF16: e.code = f16_bits(v), e.value = half_to_float(static_cast<std::uint16_t>(e.code)); break;
    default: e.code = float_bits(v), e.value = v; break;
  }
  return e;
}

std::uint8_t producer_code(const QuantizedWeight& w, Convention c, float x, float s) {
  switch (convention_info(c).cast) {
    case ProducerCast::kDivideF32: return fp8_encode(*w.codes_format, x / s);
    case ProducerCast::kDivideBf16: return fp8_encode(*w.codes_format, bf16_to_float(bf16_bits(x / s)));
    case ProducerCast::kNvfp4: return encode<kE2M1>(x / s, Saturation::kSatFinite).code;
    case ProducerCast::kMxfp4: return encode<kE2M1>(mul_rn(x, 1.0f / s), Saturation::kSatFinite).code;
  }
  return 0;
}

}  // namespace fp8scope::checkpoint
