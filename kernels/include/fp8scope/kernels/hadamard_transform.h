// NVFP4's random Hadamard transform (RHT), as Transformer Engine applies it before quantizing the
// column-wise copies of activations and gradients, the operands of the wgrad GEMM (TE d0067d0,
// transformer_engine/common/recipe/__init__.py:593-609: fp4_quant_fwd_inp and fp4_quant_bwd_grad
// take random_hadamard_transform, fp4_quant_fwd_weight does not). TE transforms x.t() in groups of
// 16 consecutive elements, i.e. 16 rows of x (pytorch/custom_recipes/reference_nvfp4.py:443-446,
// 870-874), by diag(signs) @ H16 / 4 (pytorch/tensor/nvfp4_tensor.py:55-57 and 62-103; H16 is
// Sylvester's, entry (r, c) = (-1)^popcount(r & c), common/hadamard_transform/
// hadamard_transform_utils.cuh:21 and 148): a BF16 matrix of ±0.25 in an MMA with an fp32 accumulator,
// rounded to BF16 (hadamard_transform_utils.cuh:97-109, 161); the NVFP4 amax is then taken
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

// The transform of x's column-wise copy: x's column k, x.rows rounded up to 16 elements (rows past
// x's are zeros), transformed 16 elements at a time and rounded to nearest even, in BF16. Laid out
// group by group, not as the copy's rows: row g of view() holds, for x's rows 16g..16g+15, each
// column's 16 transformed values in turn. A 1x16 block of view() is then one block of the copy
// (16 consecutive tokens of a column), and no statistic of a cast in 1x16 blocks depends on where
// a block sits; the transform writes it in one stream instead of across every row of the copy.
// Elements are read as TE reads its BF16 input: NaN and Inf spread over their group.
struct HadamardTransformed {
  std::vector<std::uint16_t> bf16;
  std::int64_t columns = 0;      // x's columns: the copy's rows
  std::int64_t padded_rows = 0;  // x's rows rounded up to 16: the copy's columns
  // Where column k's transformed element at (padded) row r of x is.
  std::size_t index(std::int64_t k, std::int64_t r) const {
    return static_cast<std::size_t>((r / kHadamardSize) * columns * kHadamardSize + k * kHadamardSize + r % kHadamardSize);
  }
  TensorView view() const { return {bf16.data(), DType::kBF16, padded_rows / kHadamardSize, columns * kHadamardSize, 1.0f}; }
  std::int64_t numel() const { return columns * padded_rows; }
};

HadamardTransformed hadamard_columns(const TensorView& x);
// The same into `into`, whose buffer is kept between calls: a fresh 64 MiB copy costs more in
// zeroing and page faults than the transform itself.
void hadamard_columns(const TensorView& x, HadamardTransformed& into);

// A cast's sums measured by an engine on x's transformed copy (`spec`'s cast of hadamard_columns(x),
// te_amax the engine's TE amax of it), made against the exact transform instead, which is what the
// what-if's error is: TE rounds the transform to BF16 before it casts, and a lossless cast of the
// input must read lossless. With b the BF16 element, d the exact value less b and q b's cast (under
// stochastic rounding, its expectation): sum (b + d - q)^2 = sum (b - q)^2 + 2 sum d (b - q) +
// sum d^2 and sum (b + d) q = sum b q + sum d q. The casts are the engines' (segment kernels), in
// 1-row blocks, the only shape TE casts a transformed copy in; any other spec is refused.
Result<QuantStats> against_exact_transform(const TensorView& x, const QuantSpec& spec, float te_amax,
                                           const QuantStats& measured);

// fp32 -> BF16 bits, round to nearest even (NaN stays NaN); branch-free, so it vectorizes.
inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<std::uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

}  // namespace fp8scope
