// tiny_trainer's block-scaled recipes, cast as Transformer Engine casts them (the rules of
// kernels/include/fp8scope/kernels/scale_rules.h, which cite TE) and laid out as cuBLASLt reads them
// (tests/support/cublas_scale_layouts.h, written from NVIDIA's documentation): every GEMM operand
// is quantized fresh from fp32 along its K, the way TE keeps row-wise and column-wise copies.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <vector>

#include "fp8scope/kernels/float_formats.h"
#include "host_tensors.h"

namespace fp8scope::trainer {

enum class BlockMode {
  kMxfp8,     // TE MXFP8BlockScaling: E4M3, one E8M0 scale per 1x32 block (VEC32_UE8M0)
  kBlock1d,   // TE Float8BlockScaling activations and gradients: E4M3, fp32 per 1x128 (VEC128_32F)
  kBlock2d,   // TE Float8BlockScaling weights: E4M3, fp32 per 128x128 (BLK128x128_32F)
  kNvfp4,     // TE NVFP4BlockScaling (no RHT, no stochastic rounding): E2M1, UE4M3 per 1x16 (VEC16_UE4M3)
  kNvfp4Weight,  // NVFP4 weights: one UE4M3 per 16x16 block, repeated for each row's 1x16 block
  kNvfp4Row,  // TE's row-scaled NVFP4 activations (PR #2931): NVFP4 under each row's own amax
};

// A matrix [rows, cols] quantized along its rows (K = cols) for one GEMM.
struct BlockQuantized {
  std::vector<std::uint8_t> codes;   // row-major; E2M1 two a byte, the even element low
  std::vector<std::uint8_t> scales;  // the scale tensor as cuBLASLt reads it
  cublasLtMatmulMatrixScale_t scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  float amax = 0.0f;                 // NVFP4: the tensor's amax, which TE folds into the GEMM's alpha
  std::vector<float> row_amax;       // row-scaled NVFP4: each row's amax, which TE applies to the output
  bool row_scaled() const { return !row_amax.empty(); }
};

BlockQuantized quantize_for_gemm(const Matrix& m, BlockMode mode);

// TE's NVFP4 GEMM alpha (transformer_engine/common/recipe/nvfp4.cu, compute_nvfp4_per_tensor_scale):
// 1 * amax_A * amax_B / (6 * 6 * 448 * 448).
float nvfp4_gemm_alpha(float amax_a, float amax_b);

// An NVFP4 GEMM as TE runs it: the alpha from both amaxes, or with a row-scaled operand unit amaxes
// (pytorch/cpp_extensions/gemm.py:84-112).
float nvfp4_gemm_alpha(const BlockQuantized& a, const BlockQuantized& b);

// TE's output scaling after a GEMM with a row-scaled operand (gemm.py:353-371): out[p, q] of
// out[P, Q] = b[P, L] a[Q, L]^T times (b's row p amax or its amax) * (a's row q amax or its amax).
// Nothing to do when neither operand is row-scaled.
void apply_row_scales(Matrix& out, const BlockQuantized& a, const BlockQuantized& b);

}  // namespace fp8scope::trainer
