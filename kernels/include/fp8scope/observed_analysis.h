// What a job's own low-precision codes show (the recipe "observed"): the values they dequantize to
// with the scales its GEMM read, how many codes sit at ±max, and how the block scales spread. An
// FP8 or FP4 operand captured at its GEMM has no high-precision original, so underflow, overflow
// and MSE are not defined for it; the what-if recipes of its BF16 baseline supply those.
#pragma once

#include <cstdint>
#include <span>

#include "fp8scope/dtype.h"
#include "fp8scope/scale_layout.h"
#include "fp8scope/stats.h"
#include "fp8scope/status.h"

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

// An error when the codes, the layout or the size of the scale tensor do not fit together.
Result<ObservedAnalysis> analyze_observed(const ObservedTensor& t);

}  // namespace fp8scope
