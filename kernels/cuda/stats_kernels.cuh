// The CUDA kernels of the statistics engine. Every element-level decision comes from the shared
// headers (dtype.h, quantize_element.h, scale_rules.h, stats.h), the same code the CPU engine runs.
// Partial results are written per CUDA block and merged on the host in block order, so a result
// does not depend on scheduling; sums differ from the CPU engine's only by summation order.
#pragma once

#include <cstdint>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/observed_analysis.h"
#include "fp8scope/kernels/quantize_element.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/kernels/stats.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope::cuda {

inline constexpr int kThreads = 256;

// Where a spec's scales come from for element (row, col).
struct SpecScales {
  QuantSpec spec;
  float tensor_scale = 1.0f, tensor_scale_inv = 1.0f;  // per-tensor modes
  const float* scale = nullptr;                          // block modes: one per block
  const float* scale_inv = nullptr;
  std::int64_t blocks_per_row = 0;                       // blocks along a row
};

struct SpecTable {
  SpecScales spec[kMaxSpecsPerCall];
  int count = 0;
};


// Pass 1: moments per CUDA block (Welford per thread, Chan's merge across threads).
__global__ void moments_kernel(const void* data, DType dtype, float scale_inv, std::int64_t n, TensorMoments* partial);

// A job's own codes (observed_analysis.h), dequantized with the block scale each element's block
// reads: moments per CUDA block (as moments_kernel), the codes at ±max per CUDA block, and each
// scale block's largest and smallest nonzero |value| as float bits (amax starts at 0, amin at
// FLT_MAX's bits).
__global__ void observed_kernel(const void* codes, DType dtype, std::int64_t rows, std::int64_t cols,
                                ObservedBlocks blocks, const float* block_scale_inv, TensorMoments* partial,
                                unsigned long long* saturated, unsigned int* block_amax_bits,
                                unsigned int* block_amin_bits);

// The TE amax of each block of a spec: rows_per_block x cols_per_block elements, blocks laid out
// row-major (blocks_per_row across). One CUDA block per data block.
__global__ void block_amax_kernel(const void* data, DType dtype, float scale_inv, std::int64_t rows, std::int64_t cols,
                                  int rows_per_block, int cols_per_block, std::int64_t blocks_per_row, float* amax);

// Block scales from block amaxes, by the spec's rule (scale_rules.h, the CPU engine's too). With
// row_amax (row-scaled NVFP4, one-row blocks), block b's rule is nvfp4_rule of its row's amax.
__global__ void block_scales_kernel(BlockRule rule, const float* amax, std::int64_t blocks, float* scale,
                                    float* scale_inv, const float* row_amax, std::int64_t blocks_per_row);

// NVFP4 4over6: each block's candidate with the smaller error (four_over_six_pick), from its
// elements, one thread per block: a row's 16 errors in element order, and a 16-row block's rows by
// TE's tree (tree_sum16), as the CPU engine sums them.
__global__ void four_over_six_kernel(const void* data, DType dtype, float scale_inv, std::int64_t rows, std::int64_t cols,
                                     int rows_per_block, int cols_per_block, std::int64_t blocks_per_row, BlockRule rule,
                                     const float* amax, float* scale, float* block_scale_inv);

// Pass 2: every spec's cast of every element, one read of the tensor; partial QuantStats per spec
// per CUDA block (partial[block * count + spec]).
__global__ void quantize_kernel(const void* data, DType dtype, float scale_inv, std::int64_t rows, std::int64_t cols,
                                SpecTable specs, QuantStats* partial);

// The cast through the hardware instruction (cvt.rn.satfinite on sm_89+) and through the shared
// software path, for every input: mismatches counted (gpu-check runs it on every BF16 pattern).
__global__ void hardware_cast_agreement_kernel(const float* inputs, std::int64_t n, CastFormat format,
                                               unsigned long long* mismatches);

}  // namespace fp8scope::cuda
