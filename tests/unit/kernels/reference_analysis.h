// The slow, obvious reference the engines are checked against: one element at a time, the bit-exact
// encode()/decode() path (itself checked against cuda_fp8.h), TE's scale rules, long double sums.
// Shared by every engine test so the reference is written once.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope::reference {

struct Moments {
  std::uint64_t numel = 0, finite = 0, nonzero = 0, nan = 0, inf = 0;
  float amax = 0.0f, amin = kFloatMax;
  float min = INFINITY, max = -INFINITY;  // signed, over the finite elements
  long double sum = 0, sum_abs = 0, sum_squares = 0, m2 = 0, m3 = 0, m4 = 0;
};

struct Quant {
  std::uint64_t underflow = 0, overflow = 0, saturated = 0;
  long double squared_error = 0, dot = 0, dot_abs = 0, dequant_squares = 0;
  float scale_min = kFloatMax, scale_max = 0.0f;
  std::uint64_t histogram[kHistogramBins] = {};
};

inline std::vector<float> load(const TensorView& t) {
  std::vector<float> x(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = load_element(t.data, i, t.dtype, t.scale_inv);
  return x;
}

inline Moments moments(const std::vector<float>& x) {
  Moments m;
  m.numel = x.size();
  for (float v : x) {
    if (std::isnan(v)) { ++m.nan; continue; }
    if (std::isinf(v)) { ++m.inf; continue; }
    ++m.finite;
    m.sum += v;
    m.sum_abs += std::fabs(v);
    m.sum_squares += static_cast<long double>(v) * v;
    m.amax = std::max(m.amax, std::fabs(v));
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
    if (v != 0.0f) { ++m.nonzero; m.amin = std::min(m.amin, std::fabs(v)); }
  }
  const long double mean = m.finite ? m.sum / m.finite : 0;
  for (float v : x) {
    if (!std::isfinite(v)) continue;
    const long double d = v - mean;
    m.m2 += d * d;
    m.m3 += d * d * d;
    m.m4 += d * d * d * d;
  }
  return m;
}

// TE's amax of a set of elements: Inf counts, NaN does not.
// The counts and extremes an engine must get exactly (sums are grouped differently: callers
// compare those within their own tolerances).
inline void check_exact_moments(const TensorMoments& got, const Moments& want) {
  CHECK(got.numel == want.numel);
  CHECK(got.finite == want.finite);
  CHECK(got.nonzero == want.nonzero);
  CHECK(got.nan == want.nan);
  CHECK(got.inf == want.inf);
  CHECK(got.amax == want.amax);
  CHECK(got.amin == want.amin);
  CHECK(got.min == want.min);
  CHECK(got.max == want.max);
}

inline float te_amax_of(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, std::int64_t r0,
                        std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  float a = 0.0f;
  for (std::int64_t r = r0; r < std::min(r1, rows); ++r)
    for (std::int64_t c = c0; c < std::min(c1, cols); ++c) {
      const float v = std::fabs(x[static_cast<std::size_t>(r * cols + c)]);
      if (!std::isnan(v)) a = std::max(a, v);
    }
  return a;
}

// Each channel's TE amax, one rectangle at a time: a column is every row by one column, a row one
// row by every column.
inline std::vector<float> channel_amax(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                                       ChannelAxis axis) {
  std::vector<float> amax;
  if (axis == ChannelAxis::kColumns) {
    for (std::int64_t c = 0; c < cols; ++c) amax.push_back(te_amax_of(x, rows, cols, 0, rows, c, c + 1));
  } else if (axis == ChannelAxis::kRows) {
    for (std::int64_t r = 0; r < rows; ++r) amax.push_back(te_amax_of(x, rows, cols, r, r + 1, 0, cols));
  }
  return amax;
}

// The scales TE's rule gives a block (or the tensor) of this amax; the rules themselves are pinned
// to TE's source by scale_rules_test.
inline ScalePair scales_from_amax(const QuantSpec& spec, float amax, float tensor_te_amax) {
  return block_scale(block_rule_for(spec, tensor_te_amax), amax);
}

// x is the cast's input; `exact` the value its error is measured against (x itself, or the exact
// value x is a rounding of).
template <const FloatFormat& F>
void add_element(Quant& q, float x, ScalePair s, long double exact) {
  if (!std::isfinite(x)) return;
  const float y = x * s.scale;
  const CastResult c = encode<F>(y, Saturation::kSatFinite);
  const float xq = decode<F>(c.code) * s.scale_inv;
  const int magnitude = c.code & FormatConstants<F>::kMagnitudeMask;
  if (x != 0.0f && magnitude == 0) ++q.underflow;  // U = nnz(x) - nnz(Q)
  if (c.flags & kCastOverflow) ++q.overflow;
  if (magnitude == FormatConstants<F>::kMaxCode) ++q.saturated;
  const long double d = exact - xq;
  q.squared_error += d * d;
  q.dot += exact * xq;
  q.dot_abs += std::fabs(exact * xq);
  q.dequant_squares += static_cast<long double>(xq) * xq;
  if (x != 0.0f) {
    const float ay = std::fabs(y);
    const int e = ay == 0.0f ? -1000 : (std::isinf(ay) ? 1000 : std::ilogb(ay));
    q.histogram[std::clamp(e - kHistogramMinLog2, 0, kHistogramBins - 1)]++;
  }
}

// `exact`, when given: the values each x is a rounding of, which the errors are measured against.
inline Quant quantize(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, const QuantSpec& spec,
                      float tensor_te_amax, const std::vector<double>* exact = nullptr) {
  Quant q;
  const std::int64_t br = spec.per_block() ? spec.block_rows : rows, bc = spec.per_block() ? spec.block_cols : cols;
  for (std::int64_t r0 = 0; r0 < rows; r0 += br)
    for (std::int64_t c0 = 0; c0 < cols; c0 += bc) {
      ScalePair s{1.0f, 1.0f};
      if (spec.rule == ScaleRule::kTensorFixed) s = {spec.fixed_scale, 1.0f / spec.fixed_scale};
      else if (spec.rule == ScaleRule::kTensorCurrent) s = scales_from_amax(spec, tensor_te_amax, tensor_te_amax);
      else s = scales_from_amax(spec, te_amax_of(x, rows, cols, r0, r0 + br, c0, c0 + bc), tensor_te_amax);
      q.scale_min = std::min(q.scale_min, s.scale);
      q.scale_max = std::max(q.scale_max, s.scale);
      for (std::int64_t r = r0; r < std::min(r0 + br, rows); ++r)
        for (std::int64_t c = c0; c < std::min(c0 + bc, cols); ++c) {
          const auto at = static_cast<std::size_t>(r * cols + c);
          const float v = x[at];
          const long double e = exact != nullptr ? (*exact)[at] : v;
          switch (spec.format) {
            case CastFormat::kE4M3: add_element<kE4M3>(q, v, s, e); break;
            case CastFormat::kE5M2: add_element<kE5M2>(q, v, s, e); break;
            case CastFormat::kE2M1: add_element<kE2M1>(q, v, s, e); break;
          }
        }
    }
  return q;
}

}  // namespace fp8scope::reference
