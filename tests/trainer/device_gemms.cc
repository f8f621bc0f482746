#include "device_gemms.h"

#include <cstdio>
#include <cstdlib>
#include <tuple>

namespace fp8scope::trainer {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(what, r);
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(what, s);
}

cudaDataType data_type(Element e) {
  switch (e) {
    case Element::kBF16: return CUDA_R_16BF;
    case Element::kE4M3: return CUDA_R_8F_E4M3;
    case Element::kE5M2: return CUDA_R_8F_E5M2;
    case Element::kE2M1: return CUDA_R_4F_E2M1;
  }
  return CUDA_R_16BF;
}

}  // namespace

void fail(const char* what, long code) {
  std::fprintf(stderr, "tiny_trainer: %s failed (status %ld)\n", what, code);
  std::exit(1);
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) { check(cuMemAlloc(&ptr_, bytes), "cuMemAlloc"); }
DeviceBuffer::~DeviceBuffer() { cuMemFree(ptr_); }
void DeviceBuffer::upload(const void* host, std::size_t bytes) { check(cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD"); }
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check(cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

Gemms::Gemms() {
  CUdevice device = 0;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&context_, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  check(cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate");
  check(cublasLtCreate(&lt_), "cublasLtCreate");
  check(cublasCreate(&blas_), "cublasCreate");
  check(cublasSetStream(blas_, stream_), "cublasSetStream");
  workspace_ = std::make_unique<DeviceBuffer>(kWorkspaceBytes);
  zero_ = std::make_unique<DeviceBuffer>(sizeof(float));
  const float zero = 0.0f;
  zero_->upload(&zero, sizeof zero);
}

Gemms::~Gemms() {
  workspace_.reset();
  zero_.reset();
  cublasDestroy(blas_);
  cublasLtDestroy(lt_);
  cuStreamDestroy(stream_);
}

void Gemms::lt_matmul(bool transa, bool transb, const DeviceOperand& a, int a_rows, int a_cols, const DeviceOperand& b,
                      int b_rows, int b_cols, DeviceBuffer& out, int m, int n, const float* alpha_device) {
  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const std::int32_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
  for (const auto& [operand, pointer_attr, mode_attr] :
       {std::tuple{&a, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_MODE},
        std::tuple{&b, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}}) {
    if (operand->scales == nullptr) continue;
    check(cublasLtMatmulDescSetAttribute(desc, pointer_attr, &operand->scales, sizeof operand->scales),
          "set the scale pointer");
    if (operand->scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
      const std::int32_t mode = operand->scale_mode;
      check(cublasLtMatmulDescSetAttribute(desc, mode_attr, &mode, sizeof mode), "set the scale mode");
    }
  }
  if (alpha_device != nullptr) {
    const std::int32_t device = CUBLASLT_POINTER_MODE_DEVICE;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device, sizeof device),
          "set POINTER_MODE");
  }
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  check(cublasLtMatrixLayoutCreate(&la, data_type(a.element), a_rows, a_cols, a_rows), "cublasLtMatrixLayoutCreate A");
  check(cublasLtMatrixLayoutCreate(&lb, data_type(b.element), b_rows, b_cols, b_rows), "cublasLtMatrixLayoutCreate B");
  check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m), "cublasLtMatrixLayoutCreate D");
  // With device pointers, beta too is read from the device: it lives beside the workspace.
  const float alpha = 1.0f, beta = 0.0f;
  const void* alpha_arg = alpha_device != nullptr ? static_cast<const void*>(alpha_device) : &alpha;
  const void* beta_arg = alpha_device != nullptr ? zero_->get() : &beta;
  check(cublasLtMatmul(lt_, desc, alpha_arg, a.data, la, b.data, lb, beta_arg, out.get(), ld, out.get(), ld, nullptr,
                       workspace_->get(), kWorkspaceBytes, stream_),
        "cublasLtMatmul");
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

void Gemms::fprop(const DeviceOperand& w, const DeviceOperand& x, DeviceBuffer& out, int M, int N, int K) {
  // As cuBLAS sees it (column major): out is N x M, A = w stored K x N and transposed, B = x
  // stored K x M.
  lt_matmul(true, false, w, K, N, x, K, M, out, N, M);
}

void Gemms::dgrad_nn(const DeviceOperand& w, const DeviceOperand& dy, DeviceBuffer& dx, int M, int N, int K) {
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &alpha, w.data, data_type(w.element), K, dy.data,
                     data_type(dy.element), N, &beta, dx.get(), CUDA_R_32F, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void Gemms::wgrad_nt(const DeviceOperand& x, const DeviceOperand& dy, DeviceBuffer& dw, int M, int N, int K) {
  // dW (row-major N x K) is column-major K x N = x (K x M) times dy^T (M x N).
  lt_matmul(false, true, x, K, M, dy, N, M, dw, K, N);
}

void Gemms::tn(const DeviceOperand& a, const DeviceOperand& b, DeviceBuffer& out, int P, int Q, int L,
               const float* alpha_device) {
  lt_matmul(true, false, a, L, Q, b, L, P, out, Q, P, alpha_device);
}

void Gemms::capture_probe(const DeviceOperand& w, const DeviceOperand& x, DeviceBuffer& out, int M, int N, int K) {
  check(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  fprop(w, x, out, M, N, K);
  CUgraph graph = nullptr;
  check(cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
  if (graph != nullptr) cuGraphDestroy(graph);
}

}  // namespace fp8scope::trainer
