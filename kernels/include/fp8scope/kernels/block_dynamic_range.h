// Transformer Engine's max_blockwise_dynamic_range (LogTensorStats; TE d0067d0,
// transformer_engine/debug/features/utils/stats_computation.py:18-120), over a tensor's 2D view
// (rows x cols, row-major, as TE's reshape(-1, shape[-1]) gives it):
//  - dims 1: blocks of block_size consecutive elements of the flattened view, as TE's
//    reshape(-1, block_size) makes them (a block may run from one row into the next);
//  - dims 2: the block_size x block_size tiles of reshape(-1, b, cols / b, b).permute(0, 2, 1, 3);
//  - a block's range is log2(max|x|) - log2(min nonzero |x|), 0 for a block of zeros; the
//    statistic is the largest over blocks;
//  - column-wise: the same over the transposed view (TE takes the larger of the two orientations
//    for activations and weights, log_tensor_stats.py:140).
// NaN where TE would not compute it: a view that does not reshape so (TE's check of the element
// count, or torch's reshape), or a NaN element (torch.amax propagates it).
#pragma once

#include <cstdint>
#include <vector>

#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

struct BlockRange {
  std::uint32_t block_size = 32;  // TE's default
  std::uint32_t dims = 1;         // 1 or 2
  bool operator==(const BlockRange&) const = default;
};

// At most this many a policy asks for, and the largest block side: bounds on a client's request.
inline constexpr std::size_t kMaxBlockRanges = 8;
inline constexpr std::uint32_t kMaxRangeBlockSize = 4096;

double max_block_dynamic_range(const TensorView& t, BlockRange spec, bool columnwise);

// One shape's statistic in both orientations.
struct BlockRangeValue {
  BlockRange spec;
  double rowwise = 0, columnwise = 0;
  bool operator==(const BlockRangeValue&) const = default;
};
std::vector<BlockRangeValue> block_dynamic_ranges(const TensorView& t, const std::vector<BlockRange>& specs);

}  // namespace fp8scope
