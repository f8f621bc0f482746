// A fingerprint of a tensor's FP8 codes, so two captures can be compared without keeping either:
// the FNV-1a 64-bit hash of the code bytes in row-major order. For high-precision data it is the
// fingerprint of the codes a per-tensor cast with `scale` would write (fp32(x*s) rounded to nearest
// even with satfinite, as Transformer Engine casts), so a trained BF16 weight and the FP8 weight
// an inference job loads compare equal exactly when every code matches.
#pragma once

#include <cstdint>
#include <span>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;

// The digest of FP8 codes as stored.
std::uint64_t code_digest(std::span<const std::uint8_t> codes);

// The digest of the codes casting `t` (any dtype; FP8 data is dequantized with t.scale_inv first)
// with `scale` to `format` would give.
std::uint64_t quantized_code_digest(const TensorView& t, CastFormat format, float scale);

}  // namespace fp8scope
