// The code digest against NVIDIA's cast: a BF16 weight cast code by code with cuda_fp8.h's
// __nv_cvt_float_to_fp8 (satfinite) hashes to what quantized_code_digest says for the same scale,
// for every BF16 bit pattern; one changed code or a different scale changes the digest.
#include <cuda_fp8.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "fp8scope/kernels/code_digest.h"
#include "fp8scope/kernels/dtype.h"

using namespace fp8scope;

namespace {

// Every finite BF16 bit pattern (NaN and Inf left out: a weight has none).
std::vector<std::uint16_t> all_finite_bf16() {
  std::vector<std::uint16_t> v;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7F80u) != 0x7F80u) v.push_back(static_cast<std::uint16_t>(b));
  }
  return v;
}

std::vector<std::uint8_t> nvidia_codes(const std::vector<std::uint16_t>& bf16, float scale, __nv_fp8_interpretation_t f) {
  std::vector<std::uint8_t> codes;
  for (std::uint16_t b : bf16) {
    std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    codes.push_back(__nv_cvt_float_to_fp8(x * scale, __NV_SATFINITE, f));
  }
  return codes;
}

}  // namespace

TEST_CASE("the digest of a cast equals the digest of cuda_fp8.h's codes, for every BF16 input", "[code_digest]") {
  const std::vector<std::uint16_t> w = all_finite_bf16();
  const TensorView view{w.data(), DType::kBF16, 1, static_cast<std::int64_t>(w.size()), 1.0f};
  for (float scale : {1.0f, 0x1p-100f, 3.5f, 0x1p100f}) {
    CAPTURE(scale);
    CHECK(quantized_code_digest(view, CastFormat::kE4M3, scale) == code_digest(nvidia_codes(w, scale, __NV_E4M3)));
    CHECK(quantized_code_digest(view, CastFormat::kE5M2, scale) == code_digest(nvidia_codes(w, scale, __NV_E5M2)));
  }
}

TEST_CASE("one changed code, a different scale or another order changes the digest", "[code_digest]") {
  const std::vector<std::uint16_t> w = all_finite_bf16();
  const std::vector<std::uint8_t> codes = nvidia_codes(w, 1.0f, __NV_E4M3);
  const std::uint64_t reference = code_digest(codes);
  std::vector<std::uint8_t> changed = codes;
  changed[12345] ^= 1;
  CHECK(code_digest(changed) != reference);
  std::vector<std::uint8_t> swapped = codes;
  std::swap(swapped[100], swapped[40000]);
  CHECK(code_digest(swapped) != reference);
  const TensorView view{w.data(), DType::kBF16, 1, static_cast<std::int64_t>(w.size()), 1.0f};
  CHECK(quantized_code_digest(view, CastFormat::kE4M3, 1.0f) == reference);
  CHECK(quantized_code_digest(view, CastFormat::kE4M3, 1.0000001f) != reference);
}

TEST_CASE("FP8 data is dequantized with its scale_inv before the cast", "[code_digest]") {
  // E4M3 codes with scale_inv 1/4, cast again with scale 4: the same codes come back.
  std::vector<std::uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<std::uint8_t>(c));  // not NaN
  }
  const TensorView view{codes.data(), DType::kE4M3, 1, static_cast<std::int64_t>(codes.size()), 0.25f};
  CHECK(quantized_code_digest(view, CastFormat::kE4M3, 4.0f) == code_digest(codes));
}
