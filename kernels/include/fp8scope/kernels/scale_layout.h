// cuBLASLt's scale layouts (CUBLASLT_MATMUL_MATRIX_SCALE_*, wire ScaleLayout): how large each
// scale tensor is and where the scale of a block sits in it, so the daemon can read a job's own
// block scales exactly as its GEMM read them. Written from NVIDIA's documentation:
//  - VEC16_UE4M3 and VEC32_UE8M0: cuBLAS documentation, cuBLASLt API, "1D Block Scaling Factors
//    Layout" (https://docs.nvidia.com/cuda/cublas/#d-block-scaling-factors-layout): the scale
//    matrix (one row per M/N index, one column per K block) is padded to 128 rows and 4 columns
//    and stored as 512-byte tiles of 128 x 4, tiles in row-major order; inside a tile, row r and
//    column c sit at (r % 32) * 16 + (r / 32) * 4 + c.
//  - VEC128_32F and BLK128x128_32F: cublasLtMatmulMatrixScale_t (cublasLt.h) and the GEMM-ready
//    layout TE writes for them (TE docs/features/low_precision_training/fp8_blockwise_scaling/
//    fp8_blockwise_scaling.rst, "GEMM-ready format"; transformer_engine/pytorch/tensor/
//    float8_blockwise_tensor.py get_scale_shape): 1x128 scales are a [ceil(K/128), pad4(M)] fp32
//    matrix with M contiguous; 128x128 scales are [ceil(M/128), pad4(ceil(K/128))] with the K
//    blocks contiguous (pad4: 16-byte aligned rows).
//  - OUTER_VEC_32F: one fp32 per row of op(A) (M of them) or column of op(B) (N), per cublasLt.h.
// "M/N" here is the operand's non-K length and K its reduction length, whichever way it is stored.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fp8scope/kernels/scale_tensor_size.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/scale_layout.h"

namespace fp8scope {

// A stored operand: a row-major [rows, cols] tensor, cols contiguous; K runs along cols (the TN
// case) unless k_is_outer.
struct ScaledShape {
  std::int64_t rows = 0, cols = 0;
  bool k_is_outer = false;
  std::int64_t mn() const { return k_is_outer ? cols : rows; }
  std::int64_t k() const { return k_is_outer ? rows : cols; }
};

// The layout's geometry (all zero for none), and the bytes of the scale tensor cuBLASLt reads for
// this operand.
ScaleGeometry scale_geometry(ScaleLayout layout);
std::uint64_t scale_tensor_bytes(ScaleLayout layout, const ScaledShape& shape);

// Whether the scales of an operand's first rows are the first scale_tensor_bytes of that many rows
// of its scale tensor: one block per row, stored row by row (the 1x16 and 1x32 tiles, the row
// vector), with K along the rows' contiguous dimension. Then the token rows of a padded expert
// can be read alone.
bool scales_of_rows_are_a_prefix(ScaleLayout layout, bool k_is_outer);

// The scales un-tiled into a plain grid: block (p, q), p along M/N and q along K, at
// p * k_blocks + q, both as stored (the encoded bytes, little-endian for fp32) and decoded to the
// scale_inv a value is multiplied by (NVFP4: times the per-tensor decode factor).
struct BlockScaleGrid {
  const ScaleLayoutTerm* info = nullptr;
  std::int64_t block_mn = 0, block_k = 0;  // extents, whole dimensions resolved
  std::int64_t mn_blocks = 0, k_blocks = 0;
  std::vector<float> scale_inv;
  std::vector<std::uint32_t> codes;        // the stored encoding of each scale (fp32: its bits)

  std::size_t index(std::int64_t mn, std::int64_t k) const {
    return static_cast<std::size_t>((mn / block_mn) * k_blocks + k / block_k);
  }
};

// Reads a scale tensor; an error when its size is not the layout's or the layout is unknown.
// tensor_scale_inv multiplies every decoded block scale (NVFP4's per-tensor factor, else 1).
Result<BlockScaleGrid> untile_scales(ScaleLayout layout, const ScaledShape& shape, std::span<const std::uint8_t> bytes,
                                     float tensor_scale_inv);

// The same grid from scales stored plainly, one row per M/N block and one column per K block in
// the layout's encoding (how checkpoints and dumps often keep them before a GEMM swizzles them).
Result<BlockScaleGrid> compact_scales(ScaleLayout layout, const ScaledShape& shape, std::span<const std::uint8_t> bytes,
                                      float tensor_scale_inv);

}  // namespace fp8scope
