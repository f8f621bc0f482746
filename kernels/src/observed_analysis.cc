#include "fp8scope/kernels/observed_analysis.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope {
namespace {

constexpr std::int64_t kSegment = 4096;  // columns dequantized at a time, so a row's floats stay in cache

struct CodeFormat {
  float value[256];
  std::uint8_t magnitude_mask, max_code;
};

template <const FloatFormat& F>
CodeFormat code_format_of() {
  CodeFormat f;
  for (int c = 0; c < 256; ++c) f.value[c] = decode<F>(static_cast<std::uint8_t>(c));
  f.magnitude_mask = FormatConstants<F>::kMagnitudeMask;
  f.max_code = FormatConstants<F>::kMaxCode;
  return f;
}

const CodeFormat& code_format_for(DType d) {
  static const CodeFormat e4m3 = code_format_of<kE4M3>(), e5m2 = code_format_of<kE5M2>(),
                          e2m1 = code_format_of<kE2M1>();
  return d == DType::kE5M2 ? e5m2 : (d == DType::kE2M1 ? e2m1 : e4m3);
}

// Moments of a few thousand floats, two passes (the mean first), merged into the whole by Chan's and Pébay's formulas.
void add_segment_moments(const float* x, std::int64_t n, TensorMoments& into) {
  TensorMoments m;
  m.numel = static_cast<std::uint64_t>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v != v) {
      ++m.nan;
      continue;
    }
    const float a = std::fabs(v);
    if (!is_finite(a)) {
      ++m.inf;
      continue;
    }
    ++m.finite;
    m.amax = max_f(m.amax, a);
    m.min = min_f(m.min, v);
    m.max = max_f(m.max, v);
    if (a != 0.0f) {
      ++m.nonzero;
      m.amin = min_f(m.amin, a);
    }
    m.sum += v;
    m.sum_abs += a;
    m.sum_squares += static_cast<double>(v) * v;
  }
  if (m.finite > 0) {
    const double mean = m.sum / static_cast<double>(m.finite);
    for (std::int64_t i = 0; i < n; ++i) {
      if (is_finite(x[i])) add_deviation(m, x[i] - mean);
    }
  }
  merge(into, m);
}

// Where a block scale sits in its encoding's range (see QuantStats).
struct Extremes {
  bool floor, ceiling;
};

Extremes extremes(ScaleEncoding e, std::uint32_t code, float scale_inv) {
  switch (e) {
    case ScaleEncoding::kUE8M0: return {code == 0, code == 0xFE};
    case ScaleEncoding::kUE4M3: return {code <= 1, code == static_cast<std::uint32_t>(max_code(kUE4M3))};
    case ScaleEncoding::kF32:
    case ScaleEncoding::kNone: break;
  }
  return {scale_inv < 0x1p-126f, scale_inv >= kFloatMax};
}

int scale_bin(float scale_inv) {
  const int e = scale_inv > 0.0f && is_finite(scale_inv) ? std::ilogb(scale_inv) : kScaleHistogramMinLog2;
  const int bin = e - kScaleHistogramMinLog2;
  return bin < 0 ? 0 : (bin >= kScaleHistogramBins ? kScaleHistogramBins - 1 : bin);
}

Status check(const ObservedTensor& t) {
  if (t.dtype != DType::kE4M3 && t.dtype != DType::kE5M2 && t.dtype != DType::kE2M1) {
    return Status::error(std::string("expected e4m3, e5m2 or e2m1 codes, got ") + dtype_name(t.dtype));
  }
  if (t.codes == nullptr || t.shape.rows <= 0 || t.shape.cols <= 0) {
    return Status::error("expected a nonempty tensor of codes, got " + std::to_string(t.shape.rows) + " x " +
                         std::to_string(t.shape.cols));
  }
  if (tensor_bytes(t.dtype, static_cast<std::uint64_t>(t.shape.rows), static_cast<std::uint64_t>(t.shape.cols)) == 0) {
    return Status::error("expected e2m1 rows of whole bytes, got " + std::to_string(t.shape.cols) + " columns");
  }
  if (!(std::isfinite(t.scale_inv) && t.scale_inv > 0.0f)) {
    return Status::error("expected a finite scale_inv > 0, got " + std::to_string(t.scale_inv));
  }
  return Status();
}

}  // namespace

Result<BlockScaleGrid> observed_scales(const ObservedTensor& t) {
  if (Status s = check(t); !s.ok()) return s;
  if (t.layout == ScaleLayout::kTensorScalar) {
    std::uint8_t bytes[4];
    std::memcpy(bytes, &t.scale_inv, 4);
    return untile_scales(t.layout, t.shape, bytes, 1.0f);
  }
  return t.compact_scales ? compact_scales(t.layout, t.shape, t.scales, t.scale_inv)
                          : untile_scales(t.layout, t.shape, t.scales, t.scale_inv);
}

ObservedBlocks observed_blocks(const ObservedTensor& t, const BlockScaleGrid& g) {
  return ObservedBlocks{g.block_mn, g.block_k, g.k_blocks, t.shape.k_is_outer};
}

ObservedAnalysis finish_observed(const BlockScaleGrid& g, const TensorMoments& moments, std::uint64_t saturated,
                                 std::span<const float> block_amax, std::span<const float> block_amin) {
  ObservedAnalysis out;
  out.moments = moments;
  out.te_amax = te_amax(moments.amax, moments.inf > 0);
  QuantStats& q = out.stats;
  q.saturated = saturated;
  for (std::size_t k = 0; k < block_amax.size(); ++k) {
    if (block_amax[k] == 0.0f) continue;  // a block of zeros says nothing about its scale
    ++q.scale_blocks;
    const Extremes e = extremes(g.info->encoding, g.codes[k], g.scale_inv[k]);
    q.scale_blocks_at_floor += e.floor;
    // Row-scaled NVFP4 puts each row's largest block at the ceiling by construction: no warning.
    q.scale_blocks_at_ceiling += e.ceiling && !g.info->row_scaled();
    q.max_block_dynamic_range_log2 =
        max_f(q.max_block_dynamic_range_log2, static_cast<float>(std::log2(block_amax[k]) - std::log2(block_amin[k])));
    ++q.scale_histogram[scale_bin(g.scale_inv[k])];
    const float scale = 1.0f / g.scale_inv[k];
    q.scale_min = min_f(q.scale_min, scale);
    q.scale_max = max_f(q.scale_max, scale);
  }
  if (q.scale_blocks == 0) q.scale_min = q.scale_max = 1.0f / g.scale_inv[0];
  return out;
}

namespace {

// Columns [lo, hi) of one stored row, which share the scale of block b: values into x, codes at
// ±max counted, the block's nonzero |value| range widened. No branch per element: the code width
// is a template parameter and the range update a select.
template <bool kFp4>
std::uint64_t observe_run(const ObservedTensor& t, const CodeFormat& format, std::int64_t row, std::int64_t lo,
                          std::int64_t hi, float scale_inv, float* x, float& amax, float& amin) {
  const auto* bytes = static_cast<const std::uint8_t*>(t.codes);
  const std::int64_t base = row * t.shape.cols;
  std::uint64_t saturated = 0;
  float hi_abs = amax, lo_abs = amin;
  for (std::int64_t c = lo; c < hi; ++c) {
    const std::int64_t i = base + c;
    const std::uint8_t code = kFp4 ? fp4_code(bytes, static_cast<std::size_t>(i)) : bytes[i];
    saturated += (code & format.magnitude_mask) == format.max_code;
    const float v = mul_rn(format.value[code], scale_inv);
    x[c - lo] = v;
    const float a = std::fabs(v);
    const bool counts = is_finite(a) && a != 0.0f;
    hi_abs = counts ? max_f(hi_abs, a) : hi_abs;
    lo_abs = counts ? min_f(lo_abs, a) : lo_abs;
  }
  amax = hi_abs;
  amin = lo_abs;
  return saturated;
}

}  // namespace

ObservedRows observe_rows(const ObservedTensor& t, const BlockScaleGrid& g, std::int64_t row_begin,
                          std::int64_t row_end, float* block_amax, float* block_amin) {
  const ObservedBlocks blocks = observed_blocks(t, g);
  const CodeFormat& format = code_format_for(t.dtype);
  const bool fp4 = t.dtype == DType::kE2M1;
  ObservedRows out;
  std::vector<float> x(static_cast<std::size_t>(std::min(kSegment, t.shape.cols)));
  const std::int64_t run = blocks.cols_per_block();
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    for (std::int64_t c0 = 0; c0 < t.shape.cols; c0 += kSegment) {
      const std::int64_t end = std::min(c0 + kSegment, t.shape.cols);
      for (std::int64_t lo = c0; lo < end;) {
        const std::int64_t hi = std::min(end, (lo / run + 1) * run);
        const std::size_t b = static_cast<std::size_t>(blocks.index(r, lo));
        float* xs = x.data() + (lo - c0);
        out.saturated += fp4 ? observe_run<true>(t, format, r, lo, hi, g.scale_inv[b], xs, block_amax[b], block_amin[b])
                             : observe_run<false>(t, format, r, lo, hi, g.scale_inv[b], xs, block_amax[b], block_amin[b]);
        lo = hi;
      }
      add_segment_moments(x.data(), end - c0, out.moments);
    }
  }
  return out;
}

Result<ObservedAnalysis> analyze_observed(const ObservedTensor& t) {
  Result<BlockScaleGrid> grid = observed_scales(t);
  if (!grid.ok()) return grid.status();
  const BlockScaleGrid& g = grid.value();
  std::vector<float> block_amax(g.scale_inv.size(), 0.0f), block_amin(g.scale_inv.size(), kFloatMax);
  const ObservedRows all = observe_rows(t, g, 0, t.shape.rows, block_amax.data(), block_amin.data());
  return finish_observed(g, all.moments, all.saturated, block_amax, block_amin);
}

}  // namespace fp8scope
