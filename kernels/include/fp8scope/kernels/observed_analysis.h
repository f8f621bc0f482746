// What a job's own low-precision codes show (the recipe "observed"): the values they dequantize to
// with the scales its GEMM read, how many codes sit at ±max, and how the block scales spread. An
// FP8 or FP4 operand captured at its GEMM has no high-precision original, so underflow, overflow
// and MSE are not defined for it; the what-if recipes of its BF16 baseline supply those.
#pragma once

#include <cstdint>
#include <span>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/host_device.h"
#include "fp8scope/kernels/scale_layout.h"
#include "fp8scope/kernels/stats.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope {

struct ObservedTensor {
  const void* codes = nullptr;
  DType dtype = DType::kE4M3;  // E4M3, E5M2 or E2M1 codes
  ScaledShape shape;           // [rows, cols] as stored (cols contiguous); K along cols unless k_is_outer
  ScaleLayout layout = ScaleLayout::kTensorScalar;
  std::span<const std::uint8_t> scales;  // the scale tensor, for every layout but kTensorScalar
  bool compact_scales = false;           // scales as a plain [M/N blocks, K blocks] matrix, not as cuBLASLt reads them
  float scale_inv = 1.0f;  // kTensorScalar: the scale_inv; block layouts: a per-tensor factor (NVFP4's), else 1
};

struct ObservedAnalysis {
  TensorMoments moments;  // of the dequantized values
  float te_amax = 0.0f;
  // saturated (codes at ±max), scale_min/scale_max (the cast multipliers, 1 / scale_inv, over the
  // blocks holding a nonzero value) and the block scale statistics; no error sums.
  QuantStats stats;
};

// An error when the codes, the layout or the size of the scale tensor do not fit together. The CPU
// version; StatsEngine::analyze_observed runs it where the engine's device is.
Result<ObservedAnalysis> analyze_observed(const ObservedTensor& t);

// What every engine's version shares.
// Element i of the codes (FP4: two a byte, the first in the low nibble).
FP8SCOPE_HD std::uint8_t code_of(const void* codes, std::int64_t i, DType d) {
  return d == DType::kE2M1 ? fp4_code(codes, static_cast<std::size_t>(i)) : static_cast<const std::uint8_t*>(codes)[i];
}
// Whether a code is ±max of its format (saturated).
FP8SCOPE_HD bool code_at_max(DType d, std::uint8_t code) {
  switch (d) {
    case DType::kE5M2: return (code & FormatConstants<kE5M2>::kMagnitudeMask) == FormatConstants<kE5M2>::kMaxCode;
    case DType::kE2M1: return (code & FormatConstants<kE2M1>::kMagnitudeMask) == FormatConstants<kE2M1>::kMaxCode;
    default: return (code & FormatConstants<kE4M3>::kMagnitudeMask) == FormatConstants<kE4M3>::kMaxCode;
  }
}
// The scale blocks as the stored tensor meets them: which block element (row, col) reads
// (BlockScaleGrid::index), and how far one block reaches along the stored rows and columns.
struct ObservedBlocks {
  std::int64_t block_mn = 1, block_k = 1, k_blocks = 1;
  bool k_is_outer = false;
  FP8SCOPE_HD std::int64_t index(std::int64_t row, std::int64_t col) const {
    const std::int64_t mn = k_is_outer ? col : row, k = k_is_outer ? row : col;
    return (mn / block_mn) * k_blocks + k / block_k;
  }
  // Stored rows that no block shares with the rows around them.
  FP8SCOPE_HD std::int64_t rows_per_block() const { return k_is_outer ? block_k : block_mn; }
  // Columns of a stored row that share one scale.
  FP8SCOPE_HD std::int64_t cols_per_block() const { return k_is_outer ? block_mn : block_k; }
};
// Checks the request and reads its scales (a per-tensor scale_inv becomes a grid of one block).
Result<BlockScaleGrid> observed_scales(const ObservedTensor& t);
ObservedBlocks observed_blocks(const ObservedTensor& t, const BlockScaleGrid& g);
// One range of stored rows read: the moments of its values and its codes at ±max, with each
// block's largest and smallest nonzero |value| folded into block_amax/block_amin (indexed as the
// grid; ranges read at once need blocks of their own, or ranges of whole row units).
struct ObservedRows {
  TensorMoments moments;
  std::uint64_t saturated = 0;
};
ObservedRows observe_rows(const ObservedTensor& t, const BlockScaleGrid& g, std::int64_t row_begin,
                          std::int64_t row_end, float* block_amax, float* block_amin);
// The result once the tensor is read: its moments, the codes at ±max, and every block's largest
// and smallest nonzero |value| (0 and FLT_MAX for a block of zeros) give the scale statistics.
ObservedAnalysis finish_observed(const BlockScaleGrid& g, const TensorMoments& moments, std::uint64_t saturated,
                                 std::span<const float> block_amax, std::span<const float> block_amin);

}  // namespace fp8scope
