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
    Buffers b;
    if (Status s = b.allocate(x, w); !s.ok()) return s;
    if (Status s = upload_and_cast(b, x, w); !s.ok()) return s;
    const Shape shape{x.rows, w.rows, x.cols};
    if (Status s = matmul(b, shape, CUDA_R_16BF, b.bf_w.p, b.bf_x.p, b.y_ref.p, false, false); !s.ok()) return s;
    std::vector<GemmCheckResult> results;
    for (bool fast : {true, false}) {
      Result<GemmCheckResult> r = fp8_error(b, shape, fast);
      if (!r.ok()) return r.status();
      results.push_back(r.value());
    }
    return results;
  }

 private:
  static constexpr std::size_t kWorkspaceBytes = 32 << 20;
  static constexpr int kBlocks = 1024;

  struct Shape {
    std::int64_t m, n, k;
  };

  // Every device buffer of one check: the raw operands, their BF16 and E4M3 casts, the amaxes and
  // scales, both outputs, the error partials and cuBLASLt's workspace.
  struct Buffers {
    DeviceMemory raw_x, raw_w, bf_x, bf_w, f8_x, f8_w, scalars, y_ref, y_fp8, partial, workspace;
    float* scalar() const { return static_cast<float*>(scalars.p); }  // [amax_x, amax_w, scale_inv_x, scale_inv_w]

    Status allocate(const TensorView& x, const TensorView& w) {
      const std::size_t y_bytes = static_cast<std::size_t>(x.rows * w.rows) * sizeof(float);
      const std::pair<DeviceMemory*, std::size_t> sizes[] = {
          {&raw_x, static_cast<std::size_t>(x.numel()) * dtype_bytes(x.dtype)},
          {&raw_w, static_cast<std::size_t>(w.numel()) * dtype_bytes(w.dtype)},
          {&bf_x, static_cast<std::size_t>(x.numel()) * 2},
          {&bf_w, static_cast<std::size_t>(w.numel()) * 2},
          {&f8_x, static_cast<std::size_t>(x.numel())},
          {&f8_w, static_cast<std::size_t>(w.numel())},
          {&scalars, 4 * sizeof(float)},
          {&y_ref, y_bytes},
          {&y_fp8, y_bytes},
          {&partial, kBlocks * sizeof(GemmErrorSums)},
          {&workspace, kWorkspaceBytes}};
      for (const auto& [memory, bytes] : sizes) FP8SCOPE_CUDA_CHECK(cudaMalloc(&memory->p, bytes), "cudaMalloc");
      return Status();
    }
  };

  // The operands onto the device, their amaxes, and their BF16 and current-scaling E4M3 casts.
  Status upload_and_cast(Buffers& b, const TensorView& x, const TensorView& w) {
    float* amax = b.scalar();
    FP8SCOPE_CUDA_CHECK(cudaMemsetAsync(amax, 0, 4 * sizeof(float), stream_), "memset");
    FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(b.raw_x.p, x.data, static_cast<std::size_t>(x.numel()) * dtype_bytes(x.dtype),
                                        cudaMemcpyHostToDevice, stream_),
                        "copy X");
    FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(b.raw_w.p, w.data, static_cast<std::size_t>(w.numel()) * dtype_bytes(w.dtype),
                                        cudaMemcpyHostToDevice, stream_),
                        "copy W");
    amax_kernel<<<kBlocks, kThreads, 0, stream_>>>(b.raw_x.p, x.dtype, x.scale_inv, x.numel(), amax);
    amax_kernel<<<kBlocks, kThreads, 0, stream_>>>(b.raw_w.p, w.dtype, w.scale_inv, w.numel(), amax + 1);
    convert_kernel<<<kBlocks, kThreads, 0, stream_>>>(b.raw_x.p, x.dtype, x.scale_inv, x.numel(), amax,
                                                      static_cast<__nv_bfloat16*>(b.bf_x.p),
                                                      static_cast<__nv_fp8_storage_t*>(b.f8_x.p), amax + 2);
    convert_kernel<<<kBlocks, kThreads, 0, stream_>>>(b.raw_w.p, w.dtype, w.scale_inv, w.numel(), amax + 1,
                                                      static_cast<__nv_bfloat16*>(b.bf_w.p),
                                                      static_cast<__nv_fp8_storage_t*>(b.f8_w.p), amax + 3);
    return Status();
  }

  // D = op(A) * B in the TN layout, BF16 or E4M3 (with the operands' scales, fast accumulation or not).
  Status matmul(const Buffers& buffers, const Shape& sh, cudaDataType_t type, const void* a, const void* b, void* d,
                bool fp8, bool fast) {
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
      const float* sa = buffers.scalar() + 3;  // A = W
      const float* sb = buffers.scalar() + 2;  // B = X
      const std::int8_t fast_accum = fast ? 1 : 0;
      fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa), "a scale");
      fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb), "b scale");
      fail(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof fast_accum), "fast accum");
    }
    fail(cublasLtMatrixLayoutCreate(&la, type, sh.k, sh.n, sh.k), "layout A");
    fail(cublasLtMatrixLayoutCreate(&lb, type, sh.k, sh.m, sh.k), "layout B");
    fail(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, sh.n, sh.m, sh.n), "layout D");
    const float alpha = 1.0f, beta = 0.0f;
    if (s.ok()) {
      fail(cublasLtMatmul(handle_, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, nullptr, buffers.workspace.p,
                          kWorkspaceBytes, stream_),
           fp8 ? "fp8 matmul" : "bf16 matmul");
    }
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
  }

  // The FP8 GEMM in one accumulation mode against the BF16 reference already in y_ref.
  Result<GemmCheckResult> fp8_error(Buffers& b, const Shape& sh, bool fast) {
    if (Status s = matmul(b, sh, CUDA_R_8F_E4M3, b.f8_w.p, b.f8_x.p, b.y_fp8.p, true, fast); !s.ok()) return s;
    error_kernel<<<kBlocks, kThreads, 0, stream_>>>(static_cast<float*>(b.y_ref.p), static_cast<float*>(b.y_fp8.p),
                                                    sh.m * sh.n, static_cast<GemmErrorSums*>(b.partial.p));
    std::vector<GemmErrorSums> parts(kBlocks);
    float host_scalars[4];
    FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(parts.data(), b.partial.p, parts.size() * sizeof(GemmErrorSums),
                                        cudaMemcpyDeviceToHost, stream_),
                        "copy errors");
    FP8SCOPE_CUDA_CHECK(cudaMemcpyAsync(host_scalars, b.scalars.p, sizeof host_scalars, cudaMemcpyDeviceToHost, stream_),
                        "copy scales");
    FP8SCOPE_CUDA_CHECK(cudaStreamSynchronize(stream_), "gemm check");
    GemmErrorSums sums;
    for (const GemmErrorSums& p : parts) sums.merge(p);
    GemmCheckResult r;
    r.accumulate = fast ? "fast" : "precise";
    r.rows = sh.m;
    r.m = sh.m;
    r.n = sh.n;
    r.k = sh.k;
    r.scale_x = 1.0f / host_scalars[2];
    r.scale_w = 1.0f / host_scalars[3];
    sums.finish(&r);
    return r;
  }

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
