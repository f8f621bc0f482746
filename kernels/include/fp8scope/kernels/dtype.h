// The exact conversion of every element type (vocabulary/dtype.h) to fp32: the x of the numerics
// contract is fp32(input element). Shared by the CPU and CUDA engines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/host_device.h"
#include "fp8scope/vocabulary/dtype.h"

namespace fp8scope {

// The cast format of a code dtype.
constexpr CastFormat code_format(DType d) {
  return d == DType::kE5M2 ? CastFormat::kE5M2 : (d == DType::kE2M1 ? CastFormat::kE2M1 : CastFormat::kE4M3);
}

// BF16 is the high half of an fp32.
FP8SCOPE_HD float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

// IEEE binary16 -> fp32, exact and branch-free so it vectorizes: moving the exponent and mantissa
// into fp32 position and multiplying by 2^112 re-biases normals and turns subnormals into the
// right normals; Inf/NaN (exponent 31) are patched afterwards.
FP8SCOPE_HD float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t rest = static_cast<std::uint32_t>(h & 0x7FFFu) << 13;
  const float rebased = bits_float(rest) * 0x1p112f;
  const std::uint32_t finite = float_bits(rebased);
  const std::uint32_t special = 0x7F800000u | rest;
  return bits_float(sign | ((h & 0x7C00u) == 0x7C00u ? special : finite));
}

// The value of a 4-, 8- or 16-bit element from its bits. scale_inv applies to codes only.
FP8SCOPE_HD float small_element_value(DType d, std::uint32_t bits, float scale_inv) {
  switch (d) {
    case DType::kBF16: return bf16_to_float(static_cast<std::uint16_t>(bits));
    case DType::kF16: return half_to_float(static_cast<std::uint16_t>(bits));
    case DType::kE4M3: return mul_rn(decode<kE4M3>(static_cast<std::uint8_t>(bits)), scale_inv);
    case DType::kE5M2: return mul_rn(decode<kE5M2>(static_cast<std::uint8_t>(bits)), scale_inv);
    case DType::kE2M1: return mul_rn(decode<kE2M1>(static_cast<std::uint8_t>(bits)), scale_inv);
    case DType::kF32:
    case DType::kF64: break;
  }
  return 0.0f;
}

// The FP4 code of element i of a packed buffer: the low nibble holds the even element.
FP8SCOPE_HD std::uint8_t fp4_code(const void* data, std::size_t i) {
  const std::uint8_t byte = static_cast<const std::uint8_t*>(data)[i / 2];
  return static_cast<std::uint8_t>((i % 2 == 0 ? byte : byte >> 4) & 0x0Fu);
}

// Element i of a buffer of type d as fp32. scale_inv applies to codes only.
FP8SCOPE_HD float load_element(const void* data, std::size_t i, DType d, float scale_inv) {
  switch (d) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF64: return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::kBF16:
    case DType::kF16: return small_element_value(d, static_cast<const std::uint16_t*>(data)[i], scale_inv);
    case DType::kE4M3:
    case DType::kE5M2: return small_element_value(d, static_cast<const std::uint8_t*>(data)[i], scale_inv);
    case DType::kE2M1: return small_element_value(d, fp4_code(data, i), scale_inv);
  }
  return 0.0f;
}

}  // namespace fp8scope
