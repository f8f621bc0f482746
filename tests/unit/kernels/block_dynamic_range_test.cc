// TE's max_blockwise_dynamic_range against a model of TE's own steps (stats_computation.py:54-120 at
// TE d0067d0): the view transposed for the column-wise orientation, torch's reshape materialized
// index by index (dims 2: reshape(-1, b, dim_y, b).permute(0, 2, 1, 3)), masked_fill of zeros with
// Inf, amax and amin, and the fp32 log2 difference where the block amax is not zero. Random shapes,
// block sizes that wrap rows, zero blocks, subnormals, BF16; NaN where TE would not compute it.
#include "fp8scope/kernels/block_dynamic_range.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "fp8scope/kernels/hadamard_transform.h"

using namespace fp8scope;

namespace {

// TE's computation, step by step; NaN where TE raises (the element count) or torch's reshape does.
double te_reference(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, BlockRange spec, bool columnwise) {
  // tensor_2d, or its transpose(-2, -1), as a row-major matrix of |x| in fp32.
  const std::int64_t vr = columnwise ? cols : rows, vc = columnwise ? rows : cols;
  std::vector<float> view(static_cast<std::size_t>(vr * vc));
  for (std::int64_t i = 0; i < vr; ++i) {
    for (std::int64_t j = 0; j < vc; ++j) {
      const float v = columnwise ? x[static_cast<std::size_t>(j * cols + i)] : x[static_cast<std::size_t>(i * cols + j)];
      view[static_cast<std::size_t>(i * vc + j)] = std::fabs(v);
    }
  }
  const std::int64_t b = spec.block_size, numel = vr * vc;
  std::vector<std::vector<float>> blocks;
  if (spec.dims == 1) {
    if (numel % b != 0) return std::nan("");
    for (std::int64_t start = 0; start < numel; start += b) blocks.emplace_back(view.begin() + start, view.begin() + start + b);
  } else {
    const std::int64_t dim_y = vc / b;
    if (numel % (b * b) != 0 || dim_y == 0 || numel % (b * dim_y * b) != 0) return std::nan("");
    const std::int64_t lead = numel / (b * dim_y * b);
    // t[a][p][q][r] = flat[((a * b + p) * dim_y + q) * b + r]; permuted to [a][q][p][r]: tile (a, q).
    for (std::int64_t a = 0; a < lead; ++a) {
      for (std::int64_t q = 0; q < dim_y; ++q) {
        std::vector<float>& tile = blocks.emplace_back();
        for (std::int64_t p = 0; p < b; ++p) {
          for (std::int64_t r = 0; r < b; ++r) tile.push_back(view[static_cast<std::size_t>(((a * b + p) * dim_y + q) * b + r)]);
        }
      }
    }
  }
  float widest = 0.0f;
  for (const std::vector<float>& block : blocks) {
    float amax = 0.0f, amin = std::numeric_limits<float>::infinity();
    for (float a : block) {
      if (std::isnan(a)) return std::nan("");  // torch.amax propagates NaN
      amax = std::max(amax, a);
      amin = std::min(amin, a == 0.0f ? std::numeric_limits<float>::infinity() : a);  // masked_fill(== 0, inf)
    }
    const float range = amax != 0.0f ? std::log2(amax) - std::log2(amin) : 0.0f;
    widest = std::max(widest, range);
  }
  return widest;
}

std::vector<float> random_tensor(std::mt19937_64& rng, std::size_t n) {
  std::uniform_real_distribution<float> exponent(-20.0f, 20.0f);
  std::uniform_int_distribution<int> kind(0, 9);
  std::vector<float> x(n);
  for (float& v : x) {
    const int k = kind(rng);
    v = k == 0 ? 0.0f : k == 1 ? 1e-40f : std::exp2(exponent(rng)) * (k % 2 ? -1.0f : 1.0f);
  }
  return x;
}

}  // namespace

TEST_CASE("max_blockwise_dynamic_range is TE's, row- and column-wise, in 1D and 2D blocks", "[block_dynamic_range]") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> extent(1, 40);
  int computed = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t rows = extent(rng), cols = extent(rng);
    std::vector<float> x = random_tensor(rng, static_cast<std::size_t>(rows * cols));
    if (trial % 7 == 0) std::fill(x.begin(), x.begin() + std::min<std::ptrdiff_t>(8, static_cast<std::ptrdiff_t>(x.size())), 0.0f);
    const TensorView t{x.data(), DType::kF32, rows, cols};
    for (std::uint32_t b : {1u, 2u, 3u, 4u, 8u, 32u}) {
      for (std::uint32_t dims : {1u, 2u}) {
        for (bool columnwise : {false, true}) {
          const double want = te_reference(x, rows, cols, {b, dims}, columnwise);
          const double got = max_block_dynamic_range(t, {b, dims}, columnwise);
          INFO(rows << "x" << cols << " block " << b << " dims " << dims << (columnwise ? " columnwise" : ""));
          if (std::isnan(want)) {
            ++refused;
            CHECK(std::isnan(got));
          } else {
            ++computed;
            CHECK(got == Approx(want).epsilon(1e-6).margin(1e-5));
          }
        }
      }
    }
  }
  CHECK(computed > 1000);
  CHECK(refused > 100);
}

TEST_CASE("max_blockwise_dynamic_range: worked cases, BF16, and NaN where TE has no number", "[block_dynamic_range]") {
  // Two rows of 4: blocks of 2 along rows hold {1, 8} and {0, 0}, {2, 2} and {0.5, 4}: 3 binades.
  const std::vector<float> x = {1, 8, 0, 0, 2, 2, 0.5f, 4};
  const TensorView t{x.data(), DType::kF32, 2, 4};
  CHECK(max_block_dynamic_range(t, {2, 1}, false) == 3.0);
  // Column-wise, blocks of 2 down the columns: {1, 2} {8, 2} {0, 0.5} {0, 4}: 2 binades.
  CHECK(max_block_dynamic_range(t, {2, 1}, true) == 2.0);
  // 2x2 tiles: {1, 8, 2, 2} and {0, 0, 0.5, 4}: 3 binades either way.
  CHECK(max_block_dynamic_range(t, {2, 2}, false) == 3.0);
  // Blocks of 4 wrap nothing here; blocks of 8 are the whole tensor: 8 / 0.5.
  CHECK(max_block_dynamic_range(t, {8, 1}, false) == 4.0);
  // BF16 reads the same values.
  std::vector<std::uint16_t> bf16;
  for (float v : x) bf16.push_back(float_to_bf16(v));
  CHECK(max_block_dynamic_range(TensorView{bf16.data(), DType::kBF16, 2, 4}, {2, 1}, false) == 3.0);
  // TE raises where the count does not divide; torch.amax propagates a NaN.
  CHECK(std::isnan(max_block_dynamic_range(t, {3, 1}, false)));
  CHECK(std::isnan(max_block_dynamic_range(t, {4, 2}, false)));
  std::vector<float> with_nan = x;
  with_nan[5] = std::nanf("");
  CHECK(std::isnan(max_block_dynamic_range(TensorView{with_nan.data(), DType::kF32, 2, 4}, {2, 1}, false)));
  // An Inf element: an infinite range, as log2(inf) is.
  std::vector<float> with_inf = x;
  with_inf[0] = std::numeric_limits<float>::infinity();
  CHECK(std::isinf(max_block_dynamic_range(TensorView{with_inf.data(), DType::kF32, 2, 4}, {2, 1}, false)));
}
