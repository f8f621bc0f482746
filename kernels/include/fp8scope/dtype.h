// Element types a sampled or loaded tensor can hold, and their exact conversion to fp32 (the x of
// the numerics contract is fp32(input element)). One row per type; the converters are shared by the
// CPU and CUDA engines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/fp8_cast.h"
#include "fp8scope/host_device.h"

namespace fp8scope {

// Numbered for the wire (proto/fp8scope/v1 mirrors these values); 0 is never a valid type.
enum class DType : std::uint8_t {
  kF32 = 1,
  kBF16 = 2,
  kF16 = 3,
  kF64 = 4,
  kE4M3 = 5,  // FP8 codes; the value is decode(code) * scale_inv
  kE5M2 = 6,
};

struct DTypeInfo {
  DType dtype;
  const char* name;  // as fp8scope prints it
  int bytes;
  bool is_fp8;
};

inline constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "f32", 4, false},  {DType::kBF16, "bf16", 2, false},
    {DType::kF16, "f16", 2, false},  {DType::kF64, "f64", 8, false},
    {DType::kE4M3, "e4m3", 1, true}, {DType::kE5M2, "e5m2", 1, true},
};

constexpr const DTypeInfo* dtype_info(DType d) {
  for (const auto& row : kDTypes) {
    if (row.dtype == d) return &row;
  }
  return nullptr;
}
constexpr int dtype_bytes(DType d) { return dtype_info(d) ? dtype_info(d)->bytes : 0; }
constexpr const char* dtype_name(DType d) { return dtype_info(d) ? dtype_info(d)->name : "invalid"; }

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

// The value of an 8- or 16-bit element from its bits. scale_inv applies to FP8 codes only.
FP8SCOPE_HD float small_element_value(DType d, std::uint32_t bits, float scale_inv) {
  switch (d) {
    case DType::kBF16: return bf16_to_float(static_cast<std::uint16_t>(bits));
    case DType::kF16: return half_to_float(static_cast<std::uint16_t>(bits));
    case DType::kE4M3: return mul_rn(decode<kE4M3>(static_cast<std::uint8_t>(bits)), scale_inv);
    case DType::kE5M2: return mul_rn(decode<kE5M2>(static_cast<std::uint8_t>(bits)), scale_inv);
    case DType::kF32:
    case DType::kF64: break;
  }
  return 0.0f;
}

// Element i of a buffer of type d as fp32. scale_inv applies to FP8 codes only.
FP8SCOPE_HD float load_element(const void* data, std::size_t i, DType d, float scale_inv) {
  switch (d) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF64: return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::kBF16:
    case DType::kF16: return small_element_value(d, static_cast<const std::uint16_t*>(data)[i], scale_inv);
    case DType::kE4M3:
    case DType::kE5M2: return small_element_value(d, static_cast<const std::uint8_t*>(data)[i], scale_inv);
  }
  return 0.0f;
}

}  // namespace fp8scope
