#include "fp8scope/kernels/gemm_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope {
namespace {

// The operand as fp32, and the same values cast to E4M3/E5M2 with the per-tensor current scale and
// dequantized (x̂ of the numerics contract), so both GEMMs below are plain fp32 products.
struct CastOperand {
  std::vector<float> value, dequantized;
  float scale = 1.0f;
};

CastOperand prepare(const TensorView& t, std::int64_t rows, CastFormat format) {
  CastOperand o;
  const std::size_t n = static_cast<std::size_t>(rows * t.cols);
  o.value.resize(n);
  float amax = 0.0f;
  bool inf = false;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = load_element(t.data, i, t.dtype, t.scale_inv);
    o.value[i] = v;
    const float a = std::fabs(v);
    if (std::isinf(a)) inf = true;
    if (a == a && !std::isinf(a)) amax = std::max(amax, a);
  }
  o.scale = current_scale(te_amax(amax, inf), format_max(format), false, 0.0f);
  const float scale_inv = 1.0f / o.scale;
  o.dequantized.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float y = o.value[i] * o.scale;
    const float q = format == CastFormat::kE4M3 ? decode<kE4M3>(encode<kE4M3>(y, Saturation::kSatFinite).code)
                                               : decode<kE5M2>(encode<kE5M2>(y, Saturation::kSatFinite).code);
    o.dequantized[i] = q * scale_inv;
  }
  return o;
}

}  // namespace

void GemmErrorSums::finish(GemmCheckResult* out) const {
  out->mse = count ? squared_error / static_cast<double>(count) : std::nan("");
  const double norms = std::sqrt(ref_squares) * std::sqrt(test_squares);
  out->cosine = norms > 0 ? dot / norms : (ref_squares == test_squares ? 1.0 : 0.0);
  out->max_rel_error = max_abs_ref > 0 ? max_abs_error / max_abs_ref : (max_abs_error == 0 ? 0.0 : INFINITY);
}

Result<GemmCheckResult> gemm_check_cpu(const TensorView& x, const TensorView& w, CastFormat format,
                                       std::int64_t max_flops) {
  if (x.numel() <= 0 || w.numel() <= 0) return Status::error("gemm check: expected nonempty X and W");
  if (x.cols != w.cols) {
    return Status::error("gemm check: expected X [M, K] and W [N, K] with the same K, got K = " +
                         std::to_string(x.cols) + " and " + std::to_string(w.cols));
  }
  GemmCheckResult r;
  r.accumulate = "emulated";
  r.m = x.rows;
  r.n = w.rows;
  r.k = x.cols;
  r.rows = std::clamp<std::int64_t>(max_flops / std::max<std::int64_t>(w.rows * w.cols, 1), 1, x.rows);
  const CastOperand a = prepare(x, r.rows, format), b = prepare(w, w.rows, format);
  r.scale_x = a.scale;
  r.scale_w = b.scale;
  GemmErrorSums sums;
  const std::size_t k = static_cast<std::size_t>(r.k);
  for (std::int64_t i = 0; i < r.rows; ++i) {
    const float* xr = &a.value[static_cast<std::size_t>(i) * k];
    const float* xq = &a.dequantized[static_cast<std::size_t>(i) * k];
    for (std::int64_t j = 0; j < r.n; ++j) {
      const float* wr = &b.value[static_cast<std::size_t>(j) * k];
      const float* wq = &b.dequantized[static_cast<std::size_t>(j) * k];
      float ref = 0.0f, fp8 = 0.0f;  // fp32 accumulation, as the GPU GEMMs do
      for (std::size_t p = 0; p < k; ++p) {
        ref += xr[p] * wr[p];
        fp8 += xq[p] * wq[p];
      }
      if (std::isfinite(ref) && std::isfinite(fp8)) sums.add(ref, fp8);
    }
  }
  sums.finish(&r);
  return r;
}

}  // namespace fp8scope
