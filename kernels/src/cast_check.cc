#include "fp8scope/kernels/cast_check.h"

#include <algorithm>
#include <cmath>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope {
namespace {

// TE's amax of a range (fmaxf over |x|: NaN skipped, Inf kept).
float te_amax_of(const float* x, std::int64_t n) {
  float amax = 0.0f;
  bool inf = false;
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isinf(a)) inf = true;
    else if (a > amax) amax = a;
  }
  return te_amax(amax, inf);
}

std::uint8_t encode_code(CastFormat f, float scaled) {
  switch (f) {
    case CastFormat::kE4M3: return encode<kE4M3>(scaled, Saturation::kSatFinite).code;
    case CastFormat::kE5M2: return encode<kE5M2>(scaled, Saturation::kSatFinite).code;
    case CastFormat::kE2M1: return encode<kE2M1>(scaled, Saturation::kSatFinite).code;
  }
  return 0;
}

float decode_code(CastFormat f, std::uint8_t code) {
  switch (f) {
    case CastFormat::kE4M3: return decode<kE4M3>(code);
    case CastFormat::kE5M2: return decode<kE5M2>(code);
    case CastFormat::kE2M1: return decode<kE2M1>(code);
  }
  return std::nanf("");
}

bool at_max(CastFormat f, std::uint8_t code) {
  switch (f) {
    case CastFormat::kE4M3: return (code & FormatConstants<kE4M3>::kMagnitudeMask) == FormatConstants<kE4M3>::kMaxCode;
    case CastFormat::kE5M2: return (code & FormatConstants<kE5M2>::kMagnitudeMask) == FormatConstants<kE5M2>::kMaxCode;
    case CastFormat::kE2M1: return (code & FormatConstants<kE2M1>::kMagnitudeMask) == FormatConstants<kE2M1>::kMaxCode;
  }
  return false;
}

bool is_zero_code(CastFormat f, std::uint8_t code) {
  switch (f) {
    case CastFormat::kE4M3: return (code & FormatConstants<kE4M3>::kMagnitudeMask) == 0;
    case CastFormat::kE5M2: return (code & FormatConstants<kE5M2>::kMagnitudeMask) == 0;
    case CastFormat::kE2M1: return (code & FormatConstants<kE2M1>::kMagnitudeMask) == 0;
  }
  return false;
}

// What an element decodes with, from the scale its block stores: NVFP4 multiplies in its per-tensor
// factor as TE's dequantization does (dequantize_nvfp4.cuh:68-69), the others use it as stored.
float element_scale_inv(const BlockRule& r, float stored) {
  switch (r.kind) {
    case BlockRule::kNvfp4:
      return mul_rn(mul_rn(stored, r.tensor_amax), 1.0f / (kNvfp4ElementMax * kNvfp4ScaleMax));
    case BlockRule::kNvfp4FourOverSix:
      return mul_rn(mul_rn(stored, r.tensor_amax), 1.0f / (kNvfp4ElementMax * kNvfp4FourOverSixScaleMax));
    case BlockRule::kE8M0:
    case BlockRule::kCurrent: break;
  }
  return stored;
}

// A block of rows [r0, r1) x cols [c0, c1) of t (row-major, `cols` wide).
struct Block {
  std::int64_t r0, r1, c0, c1;
};

float block_amax(const float* t, std::int64_t cols, const Block& b) {
  float amax = 0.0f;
  for (std::int64_t r = b.r0; r < b.r1; ++r) amax = std::max(amax, te_amax_of(t + r * cols + b.c0, b.c1 - b.c0));
  return amax;  // te_amax_of keeps Inf, and max() keeps it too
}

// A block's cast multiplier and the scale it stores.
struct BlockCast {
  float scale;
  float stored;
};

// 4over6's pick for one block: its errors under both candidates in TE's order (a 1x16 block's 16
// in element order; a 16x16 block's rows so, then tree_sum16 over the rows).
BlockCast four_over_six_cast(const BlockRule& rule, const float* t, std::int64_t cols, const Block& b, float amax) {
  const FourOverSixCandidates c = four_over_six_candidates(rule, amax);
  float rows4[16] = {}, rows6[16] = {};
  for (std::int64_t r = b.r0; r < b.r1; ++r) {
    float e4 = 0.0f, e6 = 0.0f;
    for (std::int64_t k = b.c0; k < b.c1; ++k) {
      const float x = t[r * cols + k];
      e4 = add_rn(e4, four_over_six_error<float>(x, c.map4.scale, c.code4, rule.tensor_amax));
      e6 = add_rn(e6, four_over_six_error<float>(x, c.map6.scale, c.code6, rule.tensor_amax));
    }
    rows4[r - b.r0] = e4;
    rows6[r - b.r0] = e6;
  }
  const bool square = b.r1 - b.r0 > 1;
  const float error4 = square ? tree_sum16(rows4) : rows4[0], error6 = square ? tree_sum16(rows6) : rows6[0];
  return four_over_six_takes_map4(error4, error6) ? BlockCast{c.map4.scale, c.code4} : BlockCast{c.map6.scale, c.code6};
}

BlockCast block_cast(const BlockRule& rule, const float* t, std::int64_t cols, const Block& b) {
  const float amax = block_amax(t, cols, b);
  switch (rule.kind) {
    case BlockRule::kNvfp4FourOverSix: return four_over_six_cast(rule, t, cols, b, amax);
    case BlockRule::kNvfp4: {
      const ScalePair s = nvfp4_block_scale(rule, amax);
      return {s.scale, decode_ue4m3(nvfp4_block_scale_code(rule, amax))};
    }
    case BlockRule::kE8M0:
    case BlockRule::kCurrent: break;
  }
  const ScalePair s = block_scale(rule, amax);
  return {s.scale, s.scale_inv};
}

// The rule of row r: row-scaled NVFP4's from the row's own amax, else the tensor's.
BlockRule rule_of_row(const QuantSpec& spec, const BlockRule& tensor_rule, const float* row, std::int64_t cols) {
  return spec.row_scaled ? nvfp4_rule(te_amax_of(row, cols)) : tensor_rule;
}

}  // namespace

Result<CastElements> observed_elements(const ObservedTensor& t) {
  ObservedTensor unscaled = t;
  if (t.layout != ScaleLayout::kTensorScalar) unscaled.scale_inv = 1.0f;
  Result<BlockScaleGrid> grid = observed_scales(unscaled);
  if (!grid.ok()) return grid.status();
  const BlockScaleGrid& g = grid.value();
  const ObservedBlocks blocks = observed_blocks(unscaled, g);
  const std::int64_t rows = t.shape.rows, cols = t.shape.cols;
  CastElements out;
  out.codes.resize(static_cast<std::size_t>(rows * cols));
  out.stored_scales.resize(out.codes.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(t.shape.k_is_outer ? c * rows + r : r * cols + c);
      out.codes[i] = code_of(t.codes, r * cols + c, t.dtype);
      out.stored_scales[i] = g.scale_inv[static_cast<std::size_t>(blocks.index(r, c))];
    }
  }
  return out;
}

std::optional<CastElements> model_cast(const TensorView& t, const QuantSpec& spec) {
  if (spec.stochastic || t.dtype != DType::kF32 || t.numel() <= 0) return std::nullopt;
  const auto* x = static_cast<const float*>(t.data);
  const auto n = static_cast<std::size_t>(t.numel());
  CastElements out;
  out.codes.resize(n);
  out.stored_scales.resize(n);
  const float amax = te_amax_of(x, t.numel());
  const BlockRule rule = block_rule_for(spec, amax);
  if (!spec.per_block()) {
    const float scale = spec.rule == ScaleRule::kTensorFixed
                            ? spec.fixed_scale
                            : current_scale(spec_amax(spec, amax), rule.numerator, rule.power_of_2, rule.epsilon);
    const float stored = 1.0f / scale;
    for (std::size_t i = 0; i < n; ++i) {
      out.codes[i] = encode_code(spec.format, mul_rn(x[i], scale));
      out.stored_scales[i] = stored;
    }
    return out;
  }
  const std::int64_t block_rows = std::max(spec.block_rows, 1), block_cols = spec.block_cols;
  for (std::int64_t r0 = 0; r0 < t.rows; r0 += block_rows) {
    const std::int64_t r1 = std::min(r0 + block_rows, t.rows);
    const BlockRule row_rule = rule_of_row(spec, rule, x + r0 * t.cols, t.cols);
    for (std::int64_t c0 = 0; c0 < t.cols; c0 += block_cols) {
      const Block b{r0, r1, c0, std::min(c0 + block_cols, t.cols)};
      const BlockCast s = block_cast(row_rule, x, t.cols, b);
      for (std::int64_t r = b.r0; r < b.r1; ++r) {
        for (std::int64_t c = b.c0; c < b.c1; ++c) {
          const auto i = static_cast<std::size_t>(r * t.cols + c);
          out.codes[i] = encode_code(spec.format, mul_rn(x[i], s.scale));
          out.stored_scales[i] = s.stored;
        }
      }
    }
  }
  return out;
}

CastCheck check_cast(const TensorView& hp, const CastElements& job, const QuantSpec& spec, const QuantStats& model) {
  CastCheck out;
  out.stats = model;
  QuantStats& s = out.stats;
  s.underflow = s.saturated = s.squared_error = s.dot = s.dequant_squares = 0;
  s.code_mismatches = s.codes_compared = 0;
  const auto* x = static_cast<const float*>(hp.data);
  const auto n = static_cast<std::size_t>(hp.numel());
  if (hp.dtype != DType::kF32 || job.codes.size() != n || job.stored_scales.size() != n) return out;
  const BlockRule rule = block_rule_for(spec, te_amax_of(x, hp.numel()));
  for (std::int64_t r = 0; r < hp.rows; ++r) {
    const float* row = x + r * hp.cols;
    const BlockRule row_rule = rule_of_row(spec, rule, row, hp.cols);
    for (std::int64_t c = 0; c < hp.cols; ++c) {
      const auto i = static_cast<std::size_t>(r * hp.cols + c);
      const float v = mul_rn(decode_code(spec.format, job.codes[i]), element_scale_inv(row_rule, job.stored_scales[i]));
      s.saturated += at_max(spec.format, job.codes[i]) && std::isfinite(row[c]);
      if (!std::isfinite(row[c])) continue;  // NaN and Inf are counted apart, as the engines count them
      const double xd = row[c], vd = v;
      s.underflow += row[c] != 0.0f && is_zero_code(spec.format, job.codes[i]);  // DESIGN.md: nnz(x) - nnz(Q)
      s.squared_error += (xd - vd) * (xd - vd);
      s.dot += xd * vd;
      s.dequant_squares += vd * vd;
    }
  }
  if (const std::optional<CastElements> mine = model_cast(hp, spec)) {
    for (std::size_t i = 0; i < n; ++i) {
      const bool same_scale = mine->stored_scales[i] == job.stored_scales[i] ||
                              (std::isnan(mine->stored_scales[i]) && std::isnan(job.stored_scales[i]));
      s.code_mismatches += mine->codes[i] != job.codes[i] || !same_scale;
    }
    s.codes_compared = n;
  }
  return out;
}

}  // namespace fp8scope
