#include <cuda_fp8.h>

#include "stats_kernels.cuh"

namespace fp8scope::cuda {
namespace {

__device__ __forceinline__ bool finite(float v) { return (float_bits(v) & 0x7F800000u) != 0x7F800000u; }

// Merges every thread's value of `item` into thread 0's, pairwise (a fixed tree, so the result
// does not depend on timing).
template <class T>
__device__ void block_merge(T& item, T* shared) {
  shared[threadIdx.x] = item;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) merge(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) item = shared[0];
}

}  // namespace

namespace {

// One element into a thread's moments: counts, amax/amin, and the running mean and central moments
// by Welford's update as Terriberry extends it to m3 and m4 (sum = mean * finite at the end,
// welford_finish).
__device__ __forceinline__ void welford_add(TensorMoments& m, double& mean, float x) {
  ++m.numel;
  if (x != x) {
    ++m.nan;
    return;
  }
  const float a = fabsf(x);
  if (!finite(x)) {
    ++m.inf;
    return;
  }
  ++m.finite;
  if (a != 0.0f) {
    ++m.nonzero;
    m.amin = min_f(m.amin, a);
  }
  m.amax = max_f(m.amax, a);
  m.min = min_f(m.min, x);
  m.max = max_f(m.max, x);
  m.sum_abs += a;
  const double n = static_cast<double>(m.finite);
  const double d = static_cast<double>(x) - mean;
  const double dn = d / n, dn2 = dn * dn, term = d * dn * (n - 1.0);
  mean += dn;
  m.m4 += term * dn2 * (n * n - 3.0 * n + 3.0) + 6.0 * dn2 * m.m2 - 4.0 * dn * m.m3;
  m.m3 += term * dn * (n - 2.0) - 3.0 * dn * m.m2;
  m.m2 += term;
  m.sum_squares += static_cast<double>(x) * x;
}

// The block's moments into partial[blockIdx.x].
__device__ void welford_finish(TensorMoments& m, double mean, TensorMoments* shared, TensorMoments* partial) {
  m.sum = mean * static_cast<double>(m.finite);
  block_merge(m, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

}  // namespace

__global__ void moments_kernel(const void* data, DType dtype, float scale_inv, std::int64_t n, TensorMoments* partial) {
  __shared__ TensorMoments shared[kThreads];
  TensorMoments m;
  double mean = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    welford_add(m, mean, load_element(data, static_cast<std::size_t>(i), dtype, scale_inv));
  }
  welford_finish(m, mean, shared, partial);
}

__global__ void observed_kernel(const void* codes, DType dtype, std::int64_t rows, std::int64_t cols,
                                ObservedBlocks blocks, const float* block_scale_inv, TensorMoments* partial,
                                unsigned long long* saturated, unsigned int* block_amax_bits,
                                unsigned int* block_amin_bits) {
  __shared__ TensorMoments shared[kThreads];
  __shared__ unsigned long long shared_saturated;
  if (threadIdx.x == 0) shared_saturated = 0;
  __syncthreads();
  TensorMoments m;
  double mean = 0.0;
  unsigned long long at_max = 0;
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint8_t code = code_of(codes, i, dtype);
    at_max += code_at_max(dtype, code) ? 1 : 0;
    const std::int64_t b = blocks.index(i / cols, i % cols);
    const float v = small_element_value(dtype, code, block_scale_inv[b]);
    welford_add(m, mean, v);
    const float a = fabsf(v);
    if (finite(a) && a != 0.0f) {  // nonnegative floats order as their bits
      atomicMax(&block_amax_bits[b], float_bits(a));
      atomicMin(&block_amin_bits[b], float_bits(a));
    }
  }
  atomicAdd(&shared_saturated, at_max);
  welford_finish(m, mean, shared, partial);
  if (threadIdx.x == 0) saturated[blockIdx.x] = shared_saturated;
}

__global__ void block_amax_kernel(const void* data, DType dtype, float scale_inv, std::int64_t rows, std::int64_t cols,
                                  int rows_per_block, int cols_per_block, std::int64_t blocks_per_row, float* amax) {
  __shared__ float shared[kThreads];
  const std::int64_t block = blockIdx.x;
  const std::int64_t r0 = (block / blocks_per_row) * rows_per_block;
  const std::int64_t c0 = (block % blocks_per_row) * cols_per_block;
  const std::int64_t r1 = min(rows, r0 + rows_per_block), c1 = min(cols, c0 + cols_per_block);
  const std::int64_t width = c1 - c0, count = (r1 - r0) * width;
  float m = 0.0f;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const std::int64_t i = (r0 + j / width) * cols + c0 + j % width;
    const float a = fabsf(load_element(data, static_cast<std::size_t>(i), dtype, scale_inv));
    m = a > m ? a : m;  // NaN skipped, Inf kept: TE's amax
  }
  shared[threadIdx.x] = m;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = max_f(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) amax[block] = shared[0];
}

__global__ void block_scales_kernel(BlockRule rule, const float* amax, std::int64_t blocks, float* scale,
                                    float* scale_inv, const float* row_amax, std::int64_t blocks_per_row) {
  const std::int64_t b = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (b >= blocks) return;
  const ScalePair p = block_scale(row_amax != nullptr ? nvfp4_rule(row_amax[b / blocks_per_row]) : rule, amax[b]);
  scale[b] = p.scale;
  scale_inv[b] = p.scale_inv;
}

__global__ void four_over_six_kernel(const void* data, DType dtype, float scale_inv, std::int64_t rows, std::int64_t cols,
                                     int rows_per_block, int cols_per_block, std::int64_t blocks_per_row, BlockRule rule,
                                     const float* amax, float* scale, float* block_scale_inv) {
  const std::int64_t b = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (b >= blocks_per_row * ((rows + rows_per_block - 1) / rows_per_block)) return;
  const FourOverSixCandidates c = four_over_six_candidates(rule, amax[b]);
  const std::int64_t r0 = (b / blocks_per_row) * rows_per_block, c0 = (b % blocks_per_row) * cols_per_block;
  float row4[16] = {}, row6[16] = {};  // rows_per_block is 1 or 16
  for (int i = 0; i < rows_per_block && r0 + i < rows; ++i) {
    for (std::int64_t col = c0; col < min(cols, c0 + cols_per_block); ++col) {
      const float x = load_element(data, static_cast<std::size_t>((r0 + i) * cols + col), dtype, scale_inv);
      row4[i] = add_rn(row4[i], four_over_six_error(x, c.map4.scale, c.code4, rule.tensor_amax));
      row6[i] = add_rn(row6[i], four_over_six_error(x, c.map6.scale, c.code6, rule.tensor_amax));
    }
  }
  const float e4 = rows_per_block == 1 ? row4[0] : tree_sum16(row4);
  const float e6 = rows_per_block == 1 ? row6[0] : tree_sum16(row6);
  const ScalePair p = four_over_six_pick(c, e4, e6);
  scale[b] = p.scale;
  block_scale_inv[b] = p.scale_inv;
}

namespace {

// QuantStats' counts are fp64 (expected counts under stochastic rounding): whole numbers here
// otherwise, exact below 2^53.
struct Accumulators {
  double underflow = 0, overflow = 0, saturated = 0;
  double squared_error = 0, dot = 0, dequant_squares = 0;
};

template <const FloatFormat& F>
__device__ __forceinline__ void accumulate(Accumulators& a, unsigned int* histogram, float x, float s, float si,
                                           bool stochastic) {
  float abs_scaled;
  if (stochastic) {
    const ExpectedElement<float> e = stochastic_element<F>(x, s, si);
    add_expected_element(a, x, e);
    abs_scaled = e.abs_scaled;
  } else {
    const QuantizedElement<float> e = quantize_element<F>(x, s, si);
    add_element(a, x, e);
    abs_scaled = e.abs_scaled;
  }
  if (x != 0.0f) atomicAdd(&histogram[log2_bin(abs_scaled)], 1u);
}

}  // namespace

__global__ void quantize_kernel(const void* data, DType dtype, float scale_inv, std::int64_t rows, std::int64_t cols,
                                SpecTable specs, QuantStats* partial) {
  __shared__ unsigned int histogram[kMaxSpecsPerCall][kHistogramBins];
  __shared__ Accumulators shared[kThreads];
  for (int i = threadIdx.x; i < kMaxSpecsPerCall * kHistogramBins; i += blockDim.x) (&histogram[0][0])[i] = 0;
  __syncthreads();
  Accumulators acc[kMaxSpecsPerCall];
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = load_element(data, static_cast<std::size_t>(i), dtype, scale_inv);
    if (!finite(x)) continue;  // NaN and Inf are counted by the moments, not cast
    const std::int64_t r = i / cols, c = i % cols;
#pragma unroll
    for (int k = 0; k < kMaxSpecsPerCall; ++k) {
      if (k >= specs.count) break;
      const SpecScales& sp = specs.spec[k];
      float s = sp.tensor_scale, si = sp.tensor_scale_inv;
      if (sp.scale != nullptr) {
        const std::int64_t b = (r / sp.spec.block_rows) * sp.blocks_per_row + c / sp.spec.block_cols;
        s = sp.scale[b];
        si = sp.scale_inv[b];
      }
      const bool sr = sp.spec.stochastic;
      switch (sp.spec.format) {
        case CastFormat::kE4M3: accumulate<kE4M3>(acc[k], histogram[k], x, s, si, sr); break;
        case CastFormat::kE5M2: accumulate<kE5M2>(acc[k], histogram[k], x, s, si, sr); break;
        case CastFormat::kE2M1: accumulate<kE2M1>(acc[k], histogram[k], x, s, si, sr); break;
      }
    }
  }
  for (int k = 0; k < specs.count; ++k) {
    shared[threadIdx.x] = acc[k];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (threadIdx.x < stride) add_error_sums(shared[threadIdx.x], shared[threadIdx.x + stride]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      QuantStats& q = partial[blockIdx.x * specs.count + k];
      q = QuantStats{};
      add_error_sums(q, shared[0]);
      for (int b = 0; b < kHistogramBins; ++b) q.histogram[b] = histogram[k][b];
    }
    __syncthreads();
  }
}

__global__ void hardware_cast_agreement_kernel(const float* inputs, std::int64_t n, CastFormat format,
                                               unsigned long long* mismatches) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float y = inputs[i];
  const __nv_fp8_interpretation_t kind = format == CastFormat::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  // cuda_fp8.h takes cvt.rn.satfinite here on sm_89+.
  const __nv_fp8_storage_t hw = __nv_cvt_float_to_fp8(y, __NV_SATFINITE, kind);
  const std::uint8_t sw = format == CastFormat::kE4M3 ? encode<kE4M3>(y, Saturation::kSatFinite).code
                                                     : encode<kE5M2>(y, Saturation::kSatFinite).code;
  bool agree = hw == sw;
  if (finite(y)) {  // and the vectorizable value path against the hardware's decoded code
    const float hw_value = __half2float(__half(__nv_cvt_fp8_to_halfraw(hw, kind)));
    const float rounded = format == CastFormat::kE4M3 ? round_to_grid<kE4M3>(fabsf(y)) : round_to_grid<kE5M2>(fabsf(y));
    const float clipped = min_f(rounded, format == CastFormat::kE4M3 ? FormatConstants<kE4M3>::kMax
                                                                     : FormatConstants<kE5M2>::kMax);
    agree = agree && float_bits(fabsf(hw_value)) == float_bits(clipped);
  }
  if (!agree) atomicAdd(mismatches, 1ull);
}

}  // namespace fp8scope::cuda
