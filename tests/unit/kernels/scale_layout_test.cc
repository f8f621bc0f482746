// The production un-tiling of cuBLASLt's scale tensors against the layouts written straight from
// NVIDIA's documentation (tests/support/cublas_scale_layouts.h): every layout, shapes that are and
// are not multiples of the tiles, both orientations of K, sizes, and a few offsets by hand.
#include "fp8scope/kernels/scale_layout.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "support/cublas_scale_layouts.h"
#include "fp8scope/kernels/float_cast.h"

using namespace fp8scope;
namespace doc = fp8scope::testing::cublas_layout;

namespace {

struct Case {
  std::int64_t mn, k;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A random compact scale matrix in the layout's encoding, its documented layout, and the grid the
// production code must read back.
void check_layout(ScaleLayout layout, Case c, bool k_is_outer, std::mt19937& rng) {
  const ScaleLayoutTerm& info = *scale_layout_info(layout);
  const std::int64_t block_mn = info.block_mn == 0 ? c.mn : info.block_mn;
  const std::int64_t block_k = info.block_k == 0 ? c.k : info.block_k;
  const std::int64_t mn_blocks = ceil_div(c.mn, block_mn), k_blocks = ceil_div(c.k, block_k);
  const ScaledShape shape{k_is_outer ? c.k : c.mn, k_is_outer ? c.mn : c.k, k_is_outer};
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint32_t> codes(static_cast<std::size_t>(mn_blocks * k_blocks));
  if (info.encoding == ScaleEncoding::kF32) {
    std::uniform_real_distribution<float> value(-30.0f, 10.0f);
    std::vector<float> compact(codes.size());
    for (std::size_t i = 0; i < compact.size(); ++i) {
      compact[i] = std::exp2(value(rng));
      codes[i] = float_bits(compact[i]);
    }
    std::vector<float> stored = compact;
    if (layout == ScaleLayout::kVec128F32) stored = doc::vec128(compact, mn_blocks, k_blocks);
    if (layout == ScaleLayout::kBlock128x128F32) stored = doc::blk128x128(compact, mn_blocks, k_blocks);
    bytes.resize(stored.size() * 4);
    std::memcpy(bytes.data(), stored.data(), bytes.size());
  } else {
    std::uniform_int_distribution<int> code(0, info.encoding == ScaleEncoding::kUE8M0 ? 254 : 126);
    std::vector<std::uint8_t> compact(codes.size());
    for (std::size_t i = 0; i < compact.size(); ++i) codes[i] = compact[i] = static_cast<std::uint8_t>(code(rng));
    bytes = doc::tile_128x4(compact, mn_blocks, k_blocks);
  }
  INFO(info.name << " mn " << c.mn << " k " << c.k << (k_is_outer ? " (K outer)" : ""));
  REQUIRE(scale_tensor_bytes(layout, shape) == bytes.size());
  const Result<BlockScaleGrid> grid = untile_scales(layout, shape, bytes, 1.0f);
  REQUIRE(grid.ok());
  CHECK(grid.value().mn_blocks == mn_blocks);
  CHECK(grid.value().k_blocks == k_blocks);
  CHECK(grid.value().codes == codes);
  // And the grid answers for elements: the scale of element (i, l) is block (i / bm, l / bk).
  std::uniform_int_distribution<std::int64_t> any_mn(0, c.mn - 1), any_k(0, c.k - 1);
  for (int n = 0; n < 50; ++n) {
    const std::int64_t i = any_mn(rng), l = any_k(rng);
    CHECK(grid.value().codes[grid.value().index(i, l)] == codes[static_cast<std::size_t>((i / block_mn) * k_blocks + l / block_k)]);
  }
}

}  // namespace

TEST_CASE("every scale layout reads back as the documentation lays it out", "[scale_layout]") {
  std::mt19937 rng(11);
  const Case cases[] = {{1, 16}, {5, 160}, {127, 64}, {128, 512}, {129, 48}, {300, 1000}, {217, 256}, {1, 4096}};
  for (const ScaleLayoutTerm& info : scale_layouts()) {
    for (Case c : cases) {
      for (bool k_is_outer : {false, true}) check_layout(info.value, c, k_is_outer, rng);
    }
  }
}

TEST_CASE("128x4 tiles, by hand: the documented offsets of a few scales", "[scale_layout]") {
  // A 300 x 10 scale matrix (MXFP8 of a 300 x 320 operand): 3 row tiles x 3 column tiles.
  const ScaledShape shape{300, 320, false};
  std::vector<std::uint8_t> bytes(scale_tensor_bytes(ScaleLayout::kVec32Ue8m0, shape), 0);
  REQUIRE(bytes.size() == 384 * 12);
  bytes[0] = 1;                                 // scale (0, 0): tile 0, first byte
  bytes[16] = 2;                                // (1, 0): row 1 of a 32-row group, 16 bytes on
  bytes[4] = 3;                                 // (32, 0): the next group of 32 rows, 4 bytes on
  bytes[3] = 4;                                 // (0, 3): the fourth column
  bytes[512] = 5;                               // (0, 4): the next tile along the row
  bytes[3 * 512 + 16 * 3 + 4 * 1 + 2] = 6;      // (128 + 32 + 3, 2): row tile 1, a = 1, b = 3
  const BlockScaleGrid g = untile_scales(ScaleLayout::kVec32Ue8m0, shape, bytes, 1.0f).value();
  CHECK(g.codes[g.index(0, 0)] == 1);
  CHECK(g.codes[g.index(1, 0)] == 2);
  CHECK(g.codes[g.index(32, 0)] == 3);
  CHECK(g.codes[g.index(0, 3 * 32)] == 4);
  CHECK(g.codes[g.index(0, 4 * 32)] == 5);
  CHECK(g.codes[g.index(163, 2 * 32 + 31)] == 6);
  CHECK(g.scale_inv[g.index(0, 0)] == 0x1p-126f);  // E8M0 code 1
}

TEST_CASE("scales decode by their encoding, times the per-tensor factor", "[scale_layout]") {
  const ScaledShape shape{1, 32, false};
  const std::vector<std::uint8_t> ue4m3 = fp8scope::testing::cublas_layout::tile_128x4({0x7E, 0x38}, 1, 2);
  const BlockScaleGrid g = untile_scales(ScaleLayout::kVec16Ue4m3, shape, ue4m3, 0.5f).value();
  CHECK(g.scale_inv[0] == 448.0f * 0.5f);
  CHECK(g.scale_inv[1] == 1.0f * 0.5f);
}

TEST_CASE("a scale tensor of the wrong size is refused, naming both sizes", "[scale_layout]") {
  const ScaledShape shape{128, 64, false};
  const std::vector<std::uint8_t> bytes(100);
  const auto g = untile_scales(ScaleLayout::kVec32Ue8m0, shape, bytes, 1.0f);
  REQUIRE(!g.ok());
  CHECK(g.message() == "vec32_ue8m0 scales of a 128 x 64 (M/N x K) operand: expected 512 bytes, got 100");
  CHECK(!untile_scales(ScaleLayout::kNone, shape, bytes, 1.0f).ok());
  CHECK(scale_layout_from_name("vec16_ue4m3")->value == ScaleLayout::kVec16Ue4m3);
  CHECK(scale_layout_from_name("vec64") == nullptr);
}
