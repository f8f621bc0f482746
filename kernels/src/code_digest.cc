#include "fp8scope/code_digest.h"

#include "fp8scope/dtype.h"
#include "fp8scope/fp8_cast.h"

namespace fp8scope {
namespace {

template <const FloatFormat& F>
std::uint64_t digest_cast(const TensorView& t, float scale) {
  std::uint64_t h = kFnvOffset;
  const auto n = static_cast<std::size_t>(t.numel());
  for (std::size_t i = 0; i < n; ++i) {
    const float x = load_element(t.data, i, t.dtype, t.scale_inv);
    h = (h ^ encode<F>(mul_rn(x, scale), Saturation::kSatFinite).code) * kFnvPrime;
  }
  return h;
}

}  // namespace

std::uint64_t code_digest(std::span<const std::uint8_t> codes) {
  std::uint64_t h = kFnvOffset;
  for (std::uint8_t c : codes) h = (h ^ c) * kFnvPrime;
  return h;
}

std::uint64_t quantized_code_digest(const TensorView& t, Fp8Format format, float scale) {
  return format == Fp8Format::kE4M3 ? digest_cast<kE4M3>(t, scale) : digest_cast<kE5M2>(t, scale);
}

}  // namespace fp8scope
