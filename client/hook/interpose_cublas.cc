// cublasGemmEx and cublasGemmStridedBatchedEx, interposed like cublasLtMatmul. libcublas runs them
// through cublasLtMatmul, which the guard then passes straight through.
#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/hook_runtime.h"
#include "fp8scope/hook/real_api.h"

using fp8scope::hook::CallGuard;
using fp8scope::hook::HookRuntime;

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
    cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  const auto real = fp8scope::hook::cublas_api().gemm_ex;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  if (guard.observe()) {
    if (HookRuntime* hook = HookRuntime::get()) {
      hook->observe_cublas("cublasGemmEx", transa, transb, m, n, k, A, Atype, lda, 0, B, Btype, ldb, 0, 1,
                           handle);
    }
  }
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,
              algo);
}

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* A, cudaDataType Atype, int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
    long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  const auto real = fp8scope::hook::cublas_api().gemm_strided_batched_ex;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  if (guard.observe()) {
    if (HookRuntime* hook = HookRuntime::get()) {
      hook->observe_cublas("cublasGemmStridedBatchedEx", transa, transb, m, n, k, A, Atype, lda, strideA, B, Btype,
                           ldb, strideB, batchCount, handle);
    }
  }
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
              ldc, strideC, batchCount, computeType, algo);
}
