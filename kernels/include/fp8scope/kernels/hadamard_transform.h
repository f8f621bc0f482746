// NVFP4's random Hadamard transform (RHT), as Transformer Engine applies it before quantizing the
// column-wise copies of activations and gradients, the operands of the wgrad GEMM (TE d0067d0,
// transformer_engine/common/recipe/__init__.py:593-609: fp4_quant_fwd_inp and fp4_quant_bwd_grad
// take random_hadamard_transform, fp4_quant_fwd_weight does not). TE transforms x.t() in groups of
// 16 consecutive elements, i.e. 16 rows of x (pytorch/custom_recipes/reference_nvfp4.py:443-446,
// 870-874), by diag(signs) @ H16 / 4 (pytorch/tensor/nvfp4_tensor.py:55-57 and 62-103; H16 is
// Sylvester's, entry (r, c) = (-1)^popcount(r & c), common/hadamard_transform/
// hadamard_transform_utils.cuh:21 and 148), in bf16 with fp32 sums; the NVFP4 amax is then taken
// after the transform (pytorch/quantization.py:1734-1735). The transform is orthonormal, so the
// squared error, the dot product and the squares of the cast measured on the transformed tensor
// are those of the original one.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

inline constexpr int kHadamardSize = 16;
// TE's fixed sign vector (nvfp4_tensor.py:55-57); there is no seed.
inline constexpr int kHadamardSigns[kHadamardSize] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

// The transform of x's column-wise copy: a BF16 tensor of x.cols rows by x.rows rounded up to 16
// columns (rows past x's are zeros), row k holding x's column k transformed 16 elements at a time
// and rounded to nearest even. Elements are read as TE reads its BF16 input: NaN and Inf spread
// over their group.
struct HadamardTransformed {
  std::vector<std::uint16_t> bf16;
  TensorView view() const { return {bf16.data(), DType::kBF16, rows, cols, 1.0f}; }
  std::int64_t numel() const { return rows * cols; }
  std::int64_t rows = 0, cols = 0;
};

HadamardTransformed hadamard_columns(const TensorView& x);

// fp32 -> BF16 bits, round to nearest even (NaN stays NaN); branch-free, so it vectorizes.
inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<std::uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

}  // namespace fp8scope
