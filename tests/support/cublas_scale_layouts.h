// cuBLASLt's scale tensors as NVIDIA documents them, written apart from kernels/ (which the tests
// check against this): the CPU cuBLASLt fixture decodes with it, tiny_trainer lays its scales out
// with it, and scale_layout_test compares the production un-tiling with it. Header-only, no
// dependencies beyond the standard library.
//
//  - VEC16_UE4M3 / VEC32_UE8M0 (cuBLAS docs, "1D Block Scaling Factors Layout"): the scale matrix,
//    one row per M (or N) index and one column per K block, zero-padded to multiples of 128 rows
//    and 4 columns, is cut into 128 x 4 tiles stored one after another (tile rows outer); each
//    tile, seen as [4][32][4] (row = 32 * a + b), is stored transposed to [32][4][4], i.e. as
//    [b][a][column]. This is the reshape PyTorch's and TE's swizzles spell out.
//  - VEC128_32F: fp32, [K blocks][M padded to 4], M contiguous. BLK128x128_32F: fp32,
//    [M blocks][K blocks padded to 4], K blocks contiguous (cublasLt.h; TE's GEMM-ready layout).
//  - OUTER_VEC_32F: M (or N) fp32, one per row of op(A) (column of op(B)).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace fp8scope::testing::cublas_layout {

inline std::int64_t padded(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

// The position of scale (row, col) of a [rows, cols] scale matrix in the 128 x 4 tiled bytes.
inline std::int64_t tiled_position(std::int64_t row, std::int64_t col, std::int64_t cols) {
  const std::int64_t tile_cols = padded(cols, 4) / 4;
  const std::int64_t tile = (row / 128) * tile_cols + col / 4;  // [row tile][col tile], row-major
  const std::int64_t in_tile = row % 128, a = in_tile / 32, b = in_tile % 32;
  return ((tile * 32 + b) * 4 + a) * 4 + col % 4;  // [tile][b][a][col % 4]
}

// Compact 1-byte scales ([rows][cols]) into the tiled layout.
inline std::vector<std::uint8_t> tile_128x4(const std::vector<std::uint8_t>& compact, std::int64_t rows,
                                            std::int64_t cols) {
  std::vector<std::uint8_t> tiled(static_cast<std::size_t>(padded(rows, 128) * padded(cols, 4)), 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) tiled[tiled_position(r, c, cols)] = compact[r * cols + c];
  return tiled;
}

inline std::uint8_t tiled_scale(const std::uint8_t* tiled, std::int64_t row, std::int64_t col, std::int64_t cols) {
  return tiled[tiled_position(row, col, cols)];
}

// VEC128_32F: compact [mn][k_blocks] fp32 into [k_blocks][padded(mn, 4)].
inline std::vector<float> vec128(const std::vector<float>& compact, std::int64_t mn, std::int64_t k_blocks) {
  const std::int64_t ld = padded(mn, 4);
  std::vector<float> out(static_cast<std::size_t>(k_blocks * ld), 0.0f);
  for (std::int64_t i = 0; i < mn; ++i)
    for (std::int64_t q = 0; q < k_blocks; ++q) out[q * ld + i] = compact[i * k_blocks + q];
  return out;
}
inline float vec128_scale(const float* scales, std::int64_t mn, std::int64_t i, std::int64_t q) {
  return scales[q * padded(mn, 4) + i];
}

// BLK128x128_32F: compact [mn_blocks][k_blocks] into [mn_blocks][padded(k_blocks, 4)].
inline std::vector<float> blk128x128(const std::vector<float>& compact, std::int64_t mn_blocks, std::int64_t k_blocks) {
  const std::int64_t ld = padded(k_blocks, 4);
  std::vector<float> out(static_cast<std::size_t>(mn_blocks * ld), 0.0f);
  for (std::int64_t p = 0; p < mn_blocks; ++p)
    for (std::int64_t q = 0; q < k_blocks; ++q) out[p * ld + q] = compact[p * k_blocks + q];
  return out;
}
inline float blk128x128_scale(const float* scales, std::int64_t k_blocks, std::int64_t p, std::int64_t q) {
  return scales[p * padded(k_blocks, 4) + q];
}

}  // namespace fp8scope::testing::cublas_layout
