// mxfp8_2d against an oracle written from Transformer Engine's source (d0067d0, PR #2634), in fp64
// and independent of fp8scope's casts and scale rules:
// - MXFP8BlockScaling(enable_2d_quantization=True) (common/recipe/__init__.py:373) quantizes forward
//   weights with one E8M0 scale per 32x32 block (pytorch/quantization.py:1536-1548); activations
//   and gradients keep 1x32 blocks;
// - the block's amax ignores NaN (fmaxf), and its scale is ptx::float_to_e8m0(amax * max_norm_rcp)
//   (common/cast/mxfp8/quantize_mxfp8.cuh:440-446): the fp32 product rounded up to a power of two,
//   byte 0 (2^-127) for zero and for subnormal products up to 2^-127, 0xFE for Inf
//   (common/util/ptx.cuh:280-317);
// - elements are multiplied by 2^(127 - e) and cast to E4M3 with round-to-nearest-even and satfinite
//   (ptx.cuh:552-610); a partial block at the edge counts only the elements it has, as the C++
//   kernel's zero fill does (quantize_mxfp8.cuh:258).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/stats_engine.h"

using namespace fp8scope;

namespace {

// E4M3's magnitudes by code 0..126 (127 is NaN): subnormals M x 2^-9, then (1 + M/8) x 2^(E-7).
double e4m3_magnitude(int code) {
  const int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
}

struct Cast {
  double value;    // signed, saturated to +-448
  int code;        // magnitude code; 127 is the code past 448 that satfinite clips to 126
};

// Round to nearest, ties to the even code, over the grid extended by one step past 448 (480):
// landing there is an overflow, clipped to 448.
Cast e4m3_rne(double y) {
  const double a = std::fabs(y);
  int best = 0;
  for (int code = 1; code <= 127; ++code) {
    const double here = code == 127 ? 480.0 : e4m3_magnitude(code), there = e4m3_magnitude(best);
    const double dh = std::fabs(a - here), db = std::fabs(a - there);
    if (dh < db || (dh == db && code % 2 == 0)) best = code;
  }
  const double magnitude = best == 127 ? 448.0 : e4m3_magnitude(best);
  return {std::copysign(magnitude, y), best};
}

int te_e8m0(float amax) {
  const float val = amax * (1.0f / 448.0f);  // Quantized_Limits<fp8e4m3>::max_norm_rcp, in fp32
  if (std::isinf(val)) return 254;
  if (val == 0.0f) return 0;
  int exponent = 0;
  const double mantissa = std::frexp(static_cast<double>(val), &exponent);  // val = mantissa x 2^exponent
  const int ceil_log2 = mantissa == 0.5 ? exponent - 1 : exponent;
  return std::clamp(ceil_log2 + 127, 0, 254);
}

struct Expected {
  std::uint64_t underflow = 0, overflow = 0, saturated = 0;
  long double squared_error = 0;
  double scale_min = std::numeric_limits<double>::infinity(), scale_max = 0;
};

Expected oracle(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, std::int64_t block_rows) {
  Expected out;
  for (std::int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    for (std::int64_t c0 = 0; c0 < cols; c0 += 32) {
      float amax = 0;
      for (std::int64_t r = r0; r < std::min(rows, r0 + block_rows); ++r) {
        for (std::int64_t c = c0; c < std::min(cols, c0 + 32); ++c) amax = std::fmax(amax, std::fabs(x[r * cols + c]));
      }
      const int e = te_e8m0(amax);
      const double scale = std::ldexp(1.0, 127 - e);
      out.scale_min = std::min(out.scale_min, scale);
      out.scale_max = std::max(out.scale_max, scale);
      for (std::int64_t r = r0; r < std::min(rows, r0 + block_rows); ++r) {
        for (std::int64_t c = c0; c < std::min(cols, c0 + 32); ++c) {
          const double v = x[r * cols + c];
          if (!std::isfinite(v)) continue;
          const Cast q = e4m3_rne(v * scale);
          out.underflow += v != 0 && q.code == 0;
          out.overflow += q.code == 127;
          out.saturated += q.code >= 126;
          const long double d = static_cast<long double>(v) - static_cast<long double>(q.value) / scale;
          out.squared_error += d * d;
        }
      }
    }
  }
  return out;
}

QuantStats analyze(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, Operand operand) {
  const TensorView t{x.data(), DType::kF32, rows, cols, 1.0f};
  const QuantSpec spec = quant_spec_for(default_recipe(RecipeKind::kMxfp8_2d), CastFormat::kE4M3, operand, std::nullopt).value();
  TensorAnalysis a;
  REQUIRE(make_cpu_engine(2)->analyze(t, std::span<const QuantSpec>(&spec, 1), &a).ok());
  return a.quant.at(0);
}

void check(const QuantStats& got, const Expected& want) {
  CHECK(got.underflow == want.underflow);
  CHECK(got.overflow == want.overflow);
  CHECK(got.saturated == want.saturated);
  CHECK(got.scale_min == want.scale_min);
  CHECK(got.scale_max == want.scale_max);
  CHECK(std::fabs(got.squared_error - static_cast<double>(want.squared_error)) <=
        1e-12 * static_cast<double>(want.squared_error) + 1e-300);
}

// 45 x 70: 2 x 3 blocks of 32x32, the last row and column of blocks partial (13 rows, 6 columns).
constexpr std::int64_t kRows = 45, kCols = 70;

void fill_block(std::vector<float>& x, std::int64_t br, std::int64_t bc, const std::function<float(int)>& value) {
  int i = 0;
  for (std::int64_t r = br * 32; r < std::min(kRows, br * 32 + 32); ++r) {
    for (std::int64_t c = bc * 32; c < std::min(kCols, bc * 32 + 32); ++c) x[r * kCols + c] = value(i++);
  }
}

std::vector<float> pinned_cases() {
  std::vector<float> x(kRows * kCols, 0.0f);
  // Ties: amax 440 gives the block the scale 1 (440 / 448 rounds up to 2^0), so the other elements
  // sit exactly halfway between E4M3 neighbours (1.0625: to 1.0; 1.1875: to 1.25; 2^-10: to 0, an
  // underflow; 3 x 2^-10: to 2^-8; 432: to 448, saturated, as 440 is).
  const float ties[] = {1.0625f, 1.1875f, 0x1p-10f, 0x3p-10f, 432.0f, -1.0625f, 13.0f};
  fill_block(x, 0, 0, [&](int i) { return i == 0 ? 440.0f : ties[i % 7]; });
  // (0, 1) stays all zero: byte 0, the scale 2^127.
  // An Inf in a partial block: scale 0xFE (2^-127), so every finite element underflows.
  fill_block(x, 0, 2, [](int i) { return i == 3 ? INFINITY : 1.0f + static_cast<float>(i); });
  // A NaN in a partial block: amax from the other elements.
  fill_block(x, 1, 0, [](int i) { return i == 5 ? NAN : 0.01f * static_cast<float>(i % 17 - 8); });
  // Subnormal products amax / 448: up to 2^-127 (byte 0), and above it (rounded up to byte 1).
  fill_block(x, 1, 1, [](int i) { return i == 0 ? 1e-36f : 1e-38f * static_cast<float>(i % 5); });
  fill_block(x, 1, 2, [](int i) { return i == 0 ? 3e-36f : -1e-37f * static_cast<float>(i % 3); });
  return x;
}

}  // namespace

TEST_CASE("mxfp8_2d pins TE's 32x32 weight blocks: ties, zero, Inf, NaN, partial and subnormal-scale blocks") {
  const std::vector<float> x = pinned_cases();
  // The cases are what they say: the subnormal blocks' scales are bytes 0 and 1.
  CHECK(te_e8m0(1e-36f) == 0);
  CHECK(te_e8m0(3e-36f) == 1);
  CHECK(te_e8m0(INFINITY) == 254);
  CHECK(te_e8m0(440.0f) == 127);
  CHECK(e4m3_rne(1.0625).value == 1.0);
  CHECK(e4m3_rne(1.1875).value == 1.25);
  CHECK(e4m3_rne(0x1p-10).value == 0.0);
  CHECK(e4m3_rne(0x3p-10).value == 0x1p-8);
  CHECK(e4m3_rne(432).value == 448);
  const Expected w = oracle(x, kRows, kCols, 32);
  CHECK(w.scale_max == std::ldexp(1.0, 127));
  CHECK(w.scale_min == std::ldexp(1.0, -127));
  CHECK(w.underflow >= 5);  // the Inf block's finite elements, and the 2^-10 ties
  CHECK(w.saturated >= 2);
  CHECK(w.overflow == 0);   // an E8M0 scale rounded up never lets the amax past 448
  check(analyze(x, kRows, kCols, Operand::kW), w);
  // The 2-D blocks change the answer: 1x32 blocks would not give it.
  CHECK(oracle(x, kRows, kCols, 1).underflow < w.underflow);
  // Activations and gradients keep MXFP8's 1x32 blocks.
  check(analyze(x, kRows, kCols, Operand::kX), oracle(x, kRows, kCols, 1));
  check(analyze(x, kRows, kCols, Operand::kDy), oracle(x, kRows, kCols, 1));
}

TEST_CASE("mxfp8_2d matches the oracle on random weights of shapes that are and are not multiples of 32") {
  std::mt19937 rng(11);
  std::lognormal_distribution<float> magnitude(0.0f, 3.0f);
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{32, 32}, {64, 96}, {33, 31}, {200, 300}, {1, 4100}}) {
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    for (float& v : x) v = (rng() % 2 ? 1.0f : -1.0f) * magnitude(rng) * (rng() % 13 == 0 ? 0.0f : 1.0f);
    INFO(rows << "x" << cols);
    check(analyze(x, rows, cols, Operand::kW), oracle(x, rows, cols, 32));
  }
}
