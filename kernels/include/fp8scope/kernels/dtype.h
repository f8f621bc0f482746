// Element types a sampled or loaded tensor can hold, and their exact conversion to fp32 (the x of
// the numerics contract is fp32(input element)). One row per type; the converters are shared by the
// CPU and CUDA engines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/host_device.h"
#include "fp8scope/vocabulary/wire_enums.h"

namespace fp8scope {

struct DTypeInfo {
  DType dtype;
  const char* name;  // as fp8scope prints it
  int bits;          // per element: 4 for FP4, whose codes come two a byte
  bool codes;        // low-precision codes, whose values need their scales
};

inline constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "f32", 32, false},  {DType::kBF16, "bf16", 16, false}, {DType::kF16, "f16", 16, false},
    {DType::kF64, "f64", 64, false},  {DType::kE4M3, "e4m3", 8, true},   {DType::kE5M2, "e5m2", 8, true},
    {DType::kE2M1, "e2m1", 4, true},
};

constexpr const DTypeInfo* dtype_info(DType d) {
  for (const auto& row : kDTypes) {
    if (row.dtype == d) return &row;
  }
  return nullptr;
}
constexpr int dtype_bits(DType d) { return dtype_info(d) ? dtype_info(d)->bits : 0; }
// Bytes per element of the byte-addressed types; 0 for FP4 (see tensor_bytes) and unknown types.
constexpr int dtype_bytes(DType d) { return dtype_bits(d) % 8 == 0 ? dtype_bits(d) / 8 : 0; }
constexpr const char* dtype_name(DType d) { return dtype_info(d) ? dtype_info(d)->name : "invalid"; }
constexpr bool dtype_is_codes(DType d) { return dtype_info(d) && dtype_info(d)->codes; }

// Bytes of a rows x cols tensor stored densely (FP4: cols must be even, each row whole bytes);
// 0 when the shape cannot be stored so.
constexpr std::uint64_t tensor_bytes(DType d, std::uint64_t rows, std::uint64_t cols) {
  const std::uint64_t row_bits = cols * static_cast<std::uint64_t>(dtype_bits(d));
  return row_bits % 8 == 0 ? rows * (row_bits / 8) : 0;
}

// The cast format of a code dtype.
constexpr CastFormat code_format(DType d) {
  return d == DType::kE5M2 ? CastFormat::kE5M2 : (d == DType::kE2M1 ? CastFormat::kE2M1 : CastFormat::kE4M3);
}

inline std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& row : kDTypes) {
    if (name == row.name) return row.dtype;
  }
  return std::nullopt;
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
