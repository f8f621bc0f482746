// cuBLASLt GEMM check. Row-major X [M, K] and W [N, K] are column-major Xᵀ [K, M] and Wᵀ [K, N],
// so Y = X · Wᵀ (row-major [M, N]) is the column-major product Yᵀ = op(W)·Xᵀ with op = transpose:
// the "TN" layout cuBLASLt requires for FP8 (A = W, B = X, as an fprop GEMM is called).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <string>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/gpu_gemm_check.h"
#include "fp8scope/kernels/quantize_element.h"
#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope {
namespace {

constexpr int kThreads = 256;

Status failed(const std::string& what, const std::string& detail) {
  return Status::error("gpu gemm check: " + what + ": " + detail);
}

#define FP8SCOPE_CUDA_CHECK(call, what)                                              \
  do {                                                                              \
    const cudaError_t fp8scope_e = (call);                                          \
    if (fp8scope_e != cudaSuccess) return failed(what, cudaGetErrorString(fp8scope_e)); \
  } while (0)
#define FP8SCOPE_LT_CHECK(call, what)                                                    \
  do {                                                                                   \
    const cublasStatus_t fp8scope_s = (call);                                            \
    if (fp8scope_s != CUBLAS_STATUS_SUCCESS) return failed(what, std::to_string(fp8scope_s)); \
  } while (0)

// One operand in both precisions: BF16 for the reference GEMM, E4M3 at its current scale for the
// FP8 one (the same cast as the statistics, through the shared encode()).
__global__ void amax_kernel(const void* data, DType dtype, float scale_inv, std::int64_t n, float* amax) {
  float m = 0.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float a = fabsf(load_element(data, static_cast<std::size_t>(i), dtype, scale_inv));
    m = a > m ? a : m;
  }
  // Non-negative floats order like their bits, so an integer atomicMax is a float max.
  atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
}

__global__ void convert_kernel(const void* data, DType dtype, float scale_inv, std::int64_t n, const float* amax,
                               __nv_bfloat16* bf16, __nv_fp8_storage_t* fp8, float* fp8_scale_inv) {
  const float s = current_scale(*amax, FormatConstants<kE4M3>::kMax, false, 0.0f);
  if (blockIdx.x == 0 && threadIdx.x == 0) *fp8_scale_inv = 1.0f / s;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = load_element(data, static_cast<std::size_t>(i), dtype, scale_inv);
    bf16[i] = __float2bfloat16_rn(x);
    fp8[i] = encode<kE4M3>(__fmul_rn(x, s), Saturation::kSatFinite).code;
  }
}

// Each thread adds its outputs into GemmErrorSums; the block merges them pairwise (a fixed tree).
__global__ void error_kernel(const float* reference, const float* test, std::int64_t n, GemmErrorSums* partial) {
  __shared__ GemmErrorSums shared[kThreads];
  GemmErrorSums p;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double r = reference[i], t = test[i];
    if (isfinite(r) && isfinite(t)) p.add(r, t);
  }
  shared[threadIdx.x] = p;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x].merge(shared[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

// Device memory freed on every path out.
struct DeviceMemory {
  void* p = nullptr;
  ~DeviceMemory() { cudaFree(p); }
};

class CublasLtGemmCheck final : public GpuGemmCheck {
 public:
  explicit CublasLtGemmCheck(int device) : device_(device) {}
  ~CublasLtGemmCheck() override {
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status init() {
    FP8SCOPE_CUDA_CHECK(cudaSetDevice(device_), "cudaSetDevice");
    FP8SCOPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    FP8SCOPE_LT_CHECK(cublasLtCreate(&handle_), "cublasLtCreate");
    return Status();
  }

  Result<std::vector<GemmCheckResult>> run(const TensorView& x, const TensorView& w) override {
    if (x.cols != w.cols) return Status::error("gpu gemm check: X and W disagree on K");
    if (x.cols % 16 != 0 || x.rows % 16 != 0 || w.rows % 16 != 0) {
      return Status::error("gpu gemm check: cuBLASLt FP8 needs M, N and K multiples of 16");
    }
    FP8SCOPE_CUDA_CHECK(cudaSetDevice(device_), "cudaSetDevice");
    const std::int64_t m = x.rows, n = w.rows, k = x.cols;
    const std::size_t xb = static_cast<std::size_t>(x.numel()) * dtype_bytes(x.dtype);
    const std::size_t wb = static_cast<std::size_t>(w.numel()) * dtype_bytes(w.dtype);
    DeviceMemory raw_x, raw_w, bf_x, bf_w, f8_x, f8_w, scalars, y_ref, y_fp8, partial, workspace;
    const std::size_t workspace_bytes = 32 << 20;
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&raw_x.p, xb), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&raw_w.p, wb), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&bf_x.p, x.numel() * 2), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&bf_w.p, w.numel() * 2), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&f8_x.p, x.numel()), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&f8_w.p, w.numel()), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&scalars.p, 4 * sizeof(float)), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&y_ref.p, m * n * sizeof(float)), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&y_fp8.p, m * n * sizeof(float)), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&partial.p, 1024 * sizeof(GemmErrorSums)), "cudaMalloc");
    FP8SCOPE_CUDA_CHECK(cudaMalloc(&workspace.p, workspace_bytes), "cudaMalloc");
    float* amax = static_cast<float*>(scalars.p);  // [amax_x, amax_w, scale_inv_x, scale_inv_w]
    FP8SCOPE_CUDA_CHECK(cudaMemsetAsync(amax, 0, 4 * sizeof(float), stream_), "memset");
    FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(raw_x.p, x.data, xb, cudaMemcpyHostToDevice, stream_), "copy X");
    FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(raw_w.p, w.data, wb, cudaMemcpyHostToDevice, stream_), "copy W");
    amax_kernel<<<1024, kThreads, 0, stream_>>>(raw_x.p, x.dtype, x.scale_inv, x.numel(), amax);
    amax_kernel<<<1024, kThreads, 0, stream_>>>(raw_w.p, w.dtype, w.scale_inv, w.numel(), amax + 1);
    convert_kernel<<<1024, kThreads, 0, stream_>>>(raw_x.p, x.dtype, x.scale_inv, x.numel(), amax,
                                                    static_cast<__nv_bfloat16*>(bf_x.p),
                                                    static_cast<__nv_fp8_storage_t*>(f8_x.p), amax + 2);
    convert_kernel<<<1024, kThreads, 0, stream_>>>(raw_w.p, w.dtype, w.scale_inv, w.numel(), amax + 1,
                                                    static_cast<__nv_bfloat16*>(bf_w.p),
                                                    static_cast<__nv_fp8_storage_t*>(f8_w.p), amax + 3);

    auto matmul = [&](cudaDataType_t type, const void* a, const void* b, void* d, bool fp8, bool fast) -> Status {
      cublasLtMatmulDesc_t op = nullptr;
      cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
      Status s;
      auto fail = [&](cublasStatus_t st, const char* what) {
        if (s.ok() && st != CUBLAS_STATUS_SUCCESS) (void)(s = failed(what, std::to_string(st)));
      };
      fail(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
      const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
      fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "transa");
      fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt), "transb");
      if (fp8) {
        const float* sa = amax + 3;  // A = W
        const float* sb = amax + 2;  // B = X
        const std::int8_t fast_accum = fast ? 1 : 0;
        fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa), "a scale");
        fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb), "b scale");
        fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof fast_accum), "fast accum");
      }
      fail(cublasLtMatrixLayoutCreate(&la, type, k, n, k), "layout A");
      fail(cublasLtMatrixLayoutCreate(&lb, type, k, m, k), "layout B");
      fail(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, n, m, n), "layout D");
      const float alpha = 1.0f, beta = 0.0f;
      if (s.ok()) {
        fail(cublasLtMatmul(handle_, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, nullptr, workspace.p,
                            workspace_bytes, stream_),
             fp8 ? "fp8 matmul" : "bf16 matmul");
      }
      if (ld) cublasLtMatrixLayoutDestroy(ld);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (op) cublasLtMatmulDescDestroy(op);
      return s;
    };

    if (Status s = matmul(CUDA_R_16BF, bf_w.p, bf_x.p, y_ref.p, false, false); !s.ok()) return s;
    std::vector<GemmCheckResult> results;
    float host_scalars[4];
    for (bool fast : {true, false}) {
      if (Status s = matmul(CUDA_R_8F_E4M3, f8_w.p, f8_x.p, y_fp8.p, true, fast); !s.ok()) return s;
      error_kernel<<<1024, kThreads, 0, stream_>>>(static_cast<float*>(y_ref.p), static_cast<float*>(y_fp8.p), m * n,
                                                   static_cast<GemmErrorSums*>(partial.p));
      std::vector<GemmErrorSums> parts(1024);
      FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(parts.data(), partial.p, parts.size() * sizeof(GemmErrorSums),
                                          cudaMemcpyDeviceToHost, stream_),
                          "copy errors");
      FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(host_scalars, scalars.p, sizeof host_scalars, cudaMemcpyDeviceToHost, stream_),
                          "copy scales");
      FP8SCOPE_CUDA_CHECK(cudaStreamSynchronize(stream_), "gemm check");
      GemmErrorSums sums;
      for (const GemmErrorSums& p : parts) sums.merge(p);
      GemmCheckResult r;
      r.accumulate = fast ? "fast" : "precise";
      r.rows = m;
      r.m = m;
      r.n = n;
      r.k = k;
      r.scale_x = 1.0f / host_scalars[2];
      r.scale_w = 1.0f / host_scalars[3];
      sums.finish(&r);
      results.push_back(r);
    }
    return results;
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
};

}  // namespace
}  // namespace fp8scope

// The plugin's entry point (cuda_plugin.h): a GEMM check, or null and the reason in `error`.
extern "C" __attribute__((visibility("default"))) fp8scope::GpuGemmCheck* fp8scope_cuda_gemm_check_create(
    int device, char* error, std::size_t error_size) {
  auto check = std::make_unique<fp8scope::CublasLtGemmCheck>(device);
  if (fp8scope::Status s = check->init(); !s.ok()) {
    std::snprintf(error, error_size, "%s", s.message().c_str());
    return nullptr;
  }
  return check.release();
}
