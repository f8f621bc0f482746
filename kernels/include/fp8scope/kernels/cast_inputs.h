// The high-precision tensors Transformer Engine's fused casts never write (DESIGN.md "The
// casts"), recomputed in fp32 from the kernel's inputs as the kernel computes them before it
// scales and casts. Every formula is TE's (d0067d0), cited below; the kernels run them with the
// GPU's tanhf and expf and may fuse a multiply and an add, so a host recompute agrees to a few fp32
// ulps, not bit for bit: a record made from one says so (DataSource::kRecomputed).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fp8scope/kernels/stats_engine.h"
#include "fp8scope/vocabulary/cast_capture.h"

namespace fp8scope {

// LayerNorm (normalization/layernorm/ln_fwd_kernels.cuh:110-129): per row, y = rs * (x - mu),
// t = (gamma [+ 1 when zero-centered]) * y + beta, with the kernel's own mu and rsigma (read after
// the call). x is rows x cols; gamma and beta hold cols; mu and rsigma rows.
std::vector<float> layernorm_output(const TensorView& x, const TensorView& gamma, const TensorView& beta,
                                    std::span<const float> mu, std::span<const float> rsigma, bool zero_centered_gamma);

// RMSNorm (normalization/rmsnorm/rmsnorm_fwd_kernels.cuh:114-119): t = (gamma [+ 1]) * (rs * x).
std::vector<float> rmsnorm_output(const TensorView& x, const TensorView& gamma, std::span<const float> rsigma,
                                  bool zero_centered_gamma);

// A clamped SwiGLU's parameters (util/math.h ClampedSwiGLUParam; nvte_clamped_swiglu's arguments).
struct ActivationParams {
  float limit = 7.0f;
  float alpha = 1.702f;
  float linear_offset = 1.0f;  // glu_linear_offset: added to the clamped linear half
};

// An activation of x (util/math.h; vectorized_pointwise.h unary_kernel): rows x cols out of rows x
// cols, or of rows x 2*cols for a gated one, act(x[:, :cols]) * x[:, cols:] (cast/fp8/gated_fp8.cuh).
std::vector<float> activation_output(const TensorView& x, Activation a, const ActivationParams& p = {});

// The gradient through a (non-gated) activation, act'(input) * grad (vectorized_pointwise.h
// unary_grad_kernel), what nvte_quantize_dbias_d<act> casts.
std::vector<float> dactivation_output(const TensorView& grad, const TensorView& input, Activation a);

// The column-wise copy NVFP4's fused Hadamard cast writes (hadamard_transform/
// hadamard_transform_cast_fusion.cu): x^T in groups of 16 consecutive rows of x, each group times
// the 16x16 matrix the call passes (diag(signs) H16 / 4 as TE builds it), summed in fp32. The result
// is cols x rows, row-major; x's rows must be a multiple of 16 (TE's requirement).
std::vector<float> hadamard_columnwise_output(const TensorView& x, std::span<const float> matrix16x16);

}  // namespace fp8scope
