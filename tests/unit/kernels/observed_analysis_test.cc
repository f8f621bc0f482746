// A job's own codes and scales, analyzed: against a reference that dequantizes element by element
// from the compact scales (tests/support/cublas_scale_layouts.h lays them out as the GEMM reads
// them), for every layout, FP8 and FP4 codes, both orientations of K and odd shapes.
#include "fp8scope/kernels/observed_analysis.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "support/cublas_scale_layouts.h"
#include "reference_analysis.h"

using namespace fp8scope;
namespace doc = fp8scope::testing::cublas_layout;

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Generated {
  std::vector<std::uint8_t> codes, stored_scales;
  std::vector<float> values;  // the reference dequantization, row-major as stored
  std::vector<std::uint32_t> block_codes;
  std::vector<float> block_scale_inv;
  std::int64_t block_mn = 0, block_k = 0, mn_blocks = 0, k_blocks = 0;
};

float code_value(DType d, std::uint8_t c) {
  return d == DType::kE4M3 ? decode<kE4M3>(c) : (d == DType::kE5M2 ? decode<kE5M2>(c) : decode<kE2M1>(c));
}

// Codes drawn over every value (NaN codes rarely), scales per block in the layout's encoding,
// some blocks all zero, one block at each end of the scale range.
Generated generate(DType dtype, ScaleLayout layout, const ScaledShape& shape, float factor, std::mt19937& rng) {
  const ScaleLayoutTerm& info = *scale_layout_info(layout);
  Generated g;
  g.block_mn = info.block_mn == 0 ? shape.mn() : info.block_mn;
  g.block_k = info.block_k == 0 ? shape.k() : info.block_k;
  g.mn_blocks = ceil_div(shape.mn(), g.block_mn);
  g.k_blocks = ceil_div(shape.k(), g.block_k);
  const std::size_t blocks = static_cast<std::size_t>(g.mn_blocks * g.k_blocks);
  g.block_codes.resize(blocks);
  g.block_scale_inv.resize(blocks);
  std::uniform_int_distribution<int> e8m0(100, 140), ue4m3(1, 0x7E);
  std::uniform_real_distribution<float> log2(-20.0f, 4.0f);
  for (std::size_t b = 0; b < blocks; ++b) {
    switch (info.encoding) {
      case ScaleEncoding::kUE8M0:
        g.block_codes[b] = b == 1 ? 0 : (b == 2 ? 0xFE : static_cast<std::uint32_t>(e8m0(rng)));
        g.block_scale_inv[b] = decode_e8m0(static_cast<std::uint8_t>(g.block_codes[b])) * factor;
        break;
      case ScaleEncoding::kUE4M3:
        g.block_codes[b] = b == 1 ? 1 : (b == 2 ? 0x7E : static_cast<std::uint32_t>(ue4m3(rng)));
        g.block_scale_inv[b] = decode_ue4m3(static_cast<std::uint8_t>(g.block_codes[b])) * factor;
        break;
      case ScaleEncoding::kF32: {
        const float s = layout == ScaleLayout::kTensorScalar ? factor : std::exp2(std::round(log2(rng)));
        g.block_codes[b] = float_bits(s);
        g.block_scale_inv[b] = s;
        break;
      }
      case ScaleEncoding::kNone: FAIL("a layout without scales has no grid");
    }
  }
  if (info.encoding == ScaleEncoding::kF32) {
    std::vector<float> compact(blocks);
    for (std::size_t b = 0; b < blocks; ++b) compact[b] = bits_float(g.block_codes[b]);
    if (layout == ScaleLayout::kVec128F32) compact = doc::vec128(compact, g.mn_blocks, g.k_blocks);
    if (layout == ScaleLayout::kBlock128x128F32) compact = doc::blk128x128(compact, g.mn_blocks, g.k_blocks);
    g.stored_scales.resize(compact.size() * 4);
    std::memcpy(g.stored_scales.data(), compact.data(), g.stored_scales.size());
  } else {
    std::vector<std::uint8_t> compact(blocks);
    for (std::size_t b = 0; b < blocks; ++b) compact[b] = static_cast<std::uint8_t>(g.block_codes[b]);
    g.stored_scales = doc::tile_128x4(compact, g.mn_blocks, g.k_blocks);
  }
  const std::uint64_t numel = static_cast<std::uint64_t>(shape.rows * shape.cols);
  g.codes.assign(tensor_bytes(dtype, 1, numel), 0);
  g.values.resize(numel);
  std::uniform_int_distribution<int> code(0, dtype == DType::kE2M1 ? 15 : 255), zero_block(0, 9);
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    for (std::int64_t c = 0; c < shape.cols; ++c) {
      const std::int64_t mn = shape.k_is_outer ? c : r, k = shape.k_is_outer ? r : c;
      const std::size_t b = static_cast<std::size_t>((mn / g.block_mn) * g.k_blocks + k / g.block_k);
      std::uint8_t cv = static_cast<std::uint8_t>(code(rng));
      if (b % 10 == 7 && layout != ScaleLayout::kTensorScalar) cv = 0;  // a block of zeros
      const std::size_t i = static_cast<std::size_t>(r * shape.cols + c);
      if (dtype == DType::kE2M1) {
        g.codes[i / 2] |= static_cast<std::uint8_t>(cv << (4 * (i % 2)));
      } else {
        g.codes[i] = cv;
      }
      g.values[i] = code_value(dtype, cv) * g.block_scale_inv[b];
    }
  }
  return g;
}

void check(DType dtype, ScaleLayout layout, ScaledShape shape, std::mt19937& rng) {
  const float factor = layout == ScaleLayout::kVec16Ue4m3 ? 0.0625f : (layout == ScaleLayout::kTensorScalar ? 0.125f : 1.0f);
  const Generated g = generate(dtype, layout, shape, factor, rng);
  ObservedTensor t;
  t.codes = g.codes.data();
  t.dtype = dtype;
  t.shape = shape;
  t.layout = layout;
  t.scales = g.stored_scales;
  t.scale_inv = factor;
  const Result<ObservedAnalysis> got = analyze_observed(t);
  REQUIRE(got.ok());
  const reference::Moments m = reference::moments(g.values);
  const ObservedAnalysis& a = got.value();
  reference::check_exact_moments(a.moments, m);
  CHECK(a.moments.sum == Approx(static_cast<double>(m.sum)).margin(1e-9 * static_cast<double>(m.sum_abs)));
  CHECK(a.moments.sum_squares == Approx(static_cast<double>(m.sum_squares)).epsilon(1e-12));
  CHECK(a.moments.m2 == Approx(static_cast<double>(m.m2)).epsilon(1e-12));
  CHECK(a.moments.m4 == Approx(static_cast<double>(m.m4)).epsilon(1e-12));
  // Saturation: codes at ±max; the block statistics over blocks with a nonzero value.
  const std::uint8_t max_code = dtype == DType::kE4M3 ? 0x7E : (dtype == DType::kE5M2 ? 0x7B : 0x7);
  const std::uint8_t magnitude = dtype == DType::kE2M1 ? 0x7 : 0x7F;
  std::uint64_t saturated = 0;
  for (std::size_t i = 0; i < g.values.size(); ++i) {
    const std::uint8_t c = dtype == DType::kE2M1 ? (g.codes[i / 2] >> (4 * (i % 2))) & 0xF : g.codes[i];
    saturated += (c & magnitude) == max_code;
  }
  CHECK(a.stats.saturated == saturated);
  std::vector<float> amax(g.block_codes.size(), 0.0f), amin(g.block_codes.size(), kFloatMax);
  for (std::int64_t r = 0; r < shape.rows; ++r)
    for (std::int64_t c = 0; c < shape.cols; ++c) {
      const std::int64_t mn = shape.k_is_outer ? c : r, k = shape.k_is_outer ? r : c;
      const std::size_t b = static_cast<std::size_t>((mn / g.block_mn) * g.k_blocks + k / g.block_k);
      const float v = std::fabs(g.values[static_cast<std::size_t>(r * shape.cols + c)]);
      if (std::isfinite(v) && v != 0.0f) {
        amax[b] = std::max(amax[b], v);
        amin[b] = std::min(amin[b], v);
      }
    }
  std::uint64_t blocks = 0, floor = 0, ceiling = 0;
  float range = 0.0f;
  const ScaleEncoding enc = scale_layout_info(layout)->encoding;
  for (std::size_t b = 0; b < amax.size(); ++b) {
    if (amax[b] == 0.0f) continue;
    ++blocks;
    const std::uint32_t code = g.block_codes[b];
    floor += enc == ScaleEncoding::kUE8M0 ? code == 0 : (enc == ScaleEncoding::kUE4M3 ? code <= 1 : g.block_scale_inv[b] < 0x1p-126f);
    // Row-scaled NVFP4's rows each reach the ceiling by construction: not a warning, not counted.
    ceiling += enc == ScaleEncoding::kUE8M0 ? code == 0xFE
                                            : (enc == ScaleEncoding::kUE4M3 && code == 0x7E && !scale_layout_info(layout)->row_scaled());
    range = std::max(range, static_cast<float>(std::log2(amax[b]) - std::log2(amin[b])));
  }
  CHECK(a.stats.scale_blocks == blocks);
  CHECK(a.stats.scale_blocks_at_floor == floor);
  CHECK(a.stats.scale_blocks_at_ceiling == ceiling);
  CHECK(a.stats.max_block_dynamic_range_log2 == range);
  std::uint64_t histogram_total = 0;
  for (std::uint64_t n : a.stats.scale_histogram) histogram_total += n;
  CHECK(histogram_total == blocks);
}

}  // namespace

TEST_CASE("observed codes and block scales analyze as the element-by-element reference", "[observed]") {
  std::mt19937 rng(5);
  const ScaledShape shapes[] = {{1, 64, false}, {5, 160, false}, {130, 320, false}, {160, 5 * 32, true}, {200, 258, false}};
  for (const ScaleLayoutTerm& info : scale_layouts()) {
    for (DType dtype : {DType::kE4M3, DType::kE5M2, DType::kE2M1}) {
      for (const ScaledShape& shape : shapes) {
        INFO(info.name << " " << dtype_name(dtype) << " " << shape.rows << "x" << shape.cols
                       << (shape.k_is_outer ? " K outer" : ""));
        check(dtype, info.value, shape, rng);
      }
    }
  }
}

TEST_CASE("observed analysis refuses what does not fit", "[observed]") {
  const std::uint8_t codes[4] = {};
  ObservedTensor t;
  t.codes = codes;
  t.shape = {1, 4, false};
  t.dtype = DType::kBF16;
  CHECK(analyze_observed(t).message() == "expected e4m3, e5m2 or e2m1 codes, got bf16");
  t.dtype = DType::kE2M1;
  t.shape = {1, 3, false};
  CHECK(analyze_observed(t).message() == "expected e2m1 rows of whole bytes, got 3 columns");
  t.dtype = DType::kE4M3;
  t.shape = {1, 4, false};
  t.layout = ScaleLayout::kVec32Ue8m0;
  t.scales = std::span<const std::uint8_t>(codes, 4);
  CHECK(analyze_observed(t).message() == "vec32_ue8m0 scales of a 1 x 4 (M/N x K) operand: expected 512 bytes, got 4");
}

TEST_CASE("the shared element helpers: every code's saturation and place, as the engines read them", "[observed]") {
  for (DType d : {DType::kE4M3, DType::kE5M2, DType::kE2M1}) {
    const float max = format_max(code_format(d));
    const int codes = d == DType::kE2M1 ? 16 : 256;
    for (int c = 0; c < codes; ++c) {
      INFO(dtype_name(d) << " code " << c);
      const float v = small_element_value(d, static_cast<std::uint32_t>(c), 1.0f);
      CHECK(code_at_max(d, static_cast<std::uint8_t>(c)) == (std::fabs(v) == max));
    }
  }
  const std::uint8_t packed[] = {0x21, 0x43};  // FP4: the first element in the low nibble
  CHECK(code_of(packed, 0, DType::kE2M1) == 1);
  CHECK(code_of(packed, 1, DType::kE2M1) == 2);
  CHECK(code_of(packed, 3, DType::kE2M1) == 4);
  CHECK(code_of(packed, 1, DType::kE4M3) == 0x43);
  // A 1x32 block along K: K along the columns, or along the rows when it is the outer dimension.
  const ObservedBlocks along_cols{1, 32, 4, false}, along_rows{1, 32, 4, true};
  CHECK(along_cols.index(2, 65) == 2 * 4 + 2);
  CHECK(along_rows.index(65, 2) == 2 * 4 + 2);
}
