// Deterministic test tensors with the shapes of trouble FP8 meets in training: plain normal values,
// heavy tails, a few outlier channels (LLM activations), values far below the FP8 window, all zeros,
// and scattered NaN/Inf. Stored as fp32; tests convert to the dtype under test.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_cast.h"

namespace fp8scope::testing {

enum class Distribution { kNormal, kHeavyTailed, kOutlierChannels, kTiny, kAllZero, kWithNonFinite };

inline const char* distribution_name(Distribution d) {
  switch (d) {
    case Distribution::kNormal: return "normal";
    case Distribution::kHeavyTailed: return "heavy-tailed";
    case Distribution::kOutlierChannels: return "outlier-channels";
    case Distribution::kTiny: return "tiny";
    case Distribution::kAllZero: return "all-zero";
    case Distribution::kWithNonFinite: return "with-nan-inf";
  }
  return "?";
}

inline std::vector<float> generate(Distribution d, std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> student(1.5f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      float v = 0.0f;
      switch (d) {
        case Distribution::kNormal: v = normal(rng); break;
        case Distribution::kHeavyTailed: v = student(rng); break;
        case Distribution::kOutlierChannels: v = normal(rng) * (c % 97 == 3 ? 2000.0f : 1.0f); break;
        case Distribution::kTiny: v = normal(rng) * 1e-7f; break;
        case Distribution::kAllZero: v = 0.0f; break;
        case Distribution::kWithNonFinite: {
          const float u = unit(rng);
          v = u < 0.01f ? NAN : (u < 0.015f ? (u < 0.0125f ? INFINITY : -INFINITY) : normal(rng) * 30.0f);
          break;
        }
      }
      x[static_cast<std::size_t>(r * cols + c)] = v;
    }
  return x;
}

// x in the given dtype's bytes (round to nearest even; codes with satfinite at scale 1/scale_inv;
// FP4 codes two a byte, the even element low).
inline std::vector<std::uint8_t> to_bytes(const std::vector<float>& x, DType dtype, float scale_inv = 1.0f) {
  std::vector<std::uint8_t> out(tensor_bytes(dtype, 1, x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    switch (dtype) {
      case DType::kF32: std::memcpy(&out[i * 4], &v, 4); break;
      case DType::kF64: { const double w = v; std::memcpy(&out[i * 8], &w, 8); break; }
      case DType::kBF16: {
        std::uint32_t u = float_bits(v);
        const std::uint16_t h = std::isnan(v) ? 0x7FC0 : static_cast<std::uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      case DType::kF16: {
        const _Float16 h = static_cast<_Float16>(v);
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      case DType::kE4M3: out[i] = encode<kE4M3>(v / scale_inv, Saturation::kSatFinite).code; break;
      case DType::kE5M2: out[i] = encode<kE5M2>(v / scale_inv, Saturation::kSatFinite).code; break;
      case DType::kE2M1:
        out[i / 2] |= static_cast<std::uint8_t>(encode<kE2M1>(v / scale_inv, Saturation::kSatFinite).code << (4 * (i % 2)));
        break;
    }
  }
  return out;
}

}  // namespace fp8scope::testing
