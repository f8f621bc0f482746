// Input conversions to fp32 against cuda_fp16.h / cuda_bf16.h for every 16-bit pattern, and the
// dtype table's names and sizes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "fp8scope/kernels/dtype.h"

using namespace fp8scope;

namespace {
bool same_value(float a, float b) { return (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b); }
}  // namespace

TEST_CASE("all 65,536 FP16 patterns convert as cuda_fp16.h does", "[dtype]") {
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    __half_raw raw;
    raw.x = static_cast<unsigned short>(h);
    mismatches += !same_value(half_to_float(static_cast<std::uint16_t>(h)), __half2float(__half(raw)));
  }
  CHECK(mismatches == 0);
}

TEST_CASE("all 65,536 BF16 patterns convert as cuda_bf16.h does", "[dtype]") {
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    __nv_bfloat16_raw raw;
    raw.x = static_cast<unsigned short>(h);
    mismatches += !same_value(bf16_to_float(static_cast<std::uint16_t>(h)), __bfloat162float(__nv_bfloat16(raw)));
  }
  CHECK(mismatches == 0);
}

TEST_CASE("load_element reads every dtype and applies scale_inv to FP8 codes only", "[dtype]") {
  const float f32[] = {1.5f};
  const double f64[] = {0.1};
  const std::uint16_t bf16[] = {0x3FC0};  // 1.5
  const std::uint16_t f16[] = {0x3E00};   // 1.5
  const std::uint8_t e4m3[] = {0x3C};     // 1.5
  const std::uint8_t e5m2[] = {0x3E};     // 1.5
  CHECK(load_element(f32, 0, DType::kF32, 4.0f) == 1.5f);
  CHECK(load_element(f64, 0, DType::kF64, 4.0f) == 0.1f);
  CHECK(load_element(bf16, 0, DType::kBF16, 4.0f) == 1.5f);
  CHECK(load_element(f16, 0, DType::kF16, 4.0f) == 1.5f);
  CHECK(load_element(e4m3, 0, DType::kE4M3, 4.0f) == 6.0f);
  CHECK(load_element(e5m2, 0, DType::kE5M2, 0.25f) == 0.375f);
}

TEST_CASE("the dtype table names and sizes", "[dtype]") {
  CHECK(dtype_bytes(DType::kBF16) == 2);
  CHECK(dtype_bytes(DType::kF64) == 8);
  CHECK(dtype_bytes(static_cast<DType>(200)) == 0);
  CHECK(dtype_from_name("e5m2") == DType::kE5M2);
  CHECK(!dtype_from_name("int8"));
  for (const DTypeTerm& row : kDTypes) CHECK(dtype_from_name(row.name) == row.value);
}
