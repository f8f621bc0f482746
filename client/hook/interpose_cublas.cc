// cublasGemmEx and cublasGemmStridedBatchedEx, interposed like cublasLtMatmul. libcublas runs them
// through cublasLtMatmul, which the guard then passes straight through.
#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/hook_runtime.h"
#include "fp8scope/hook/real_api.h"

#include <optional>

using fp8scope::hook::CallGuard;
using fp8scope::hook::CublasOutput;
using fp8scope::hook::HookRuntime;
using fp8scope::hook::PendingOutput;

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
    cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  const auto real = fp8scope::hook::cublas_api().gemm_ex;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  HookRuntime* hook = guard.observe() ? HookRuntime::get() : nullptr;
  const std::optional<PendingOutput> output =
      hook != nullptr ? hook->observe_cublas("cublasGemmEx", transa, transb, m, n, k, A, Atype, lda, 0, B, Btype, ldb, 0,
                                             CublasOutput{C, Ctype, ldc, 0}, 1, handle)
                      : std::nullopt;
  const cublasStatus_t status = real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
                                     Ctype, ldc, computeType, algo);
  if (output && status == CUBLAS_STATUS_SUCCESS) hook->sample_output(*output);
  return status;
}

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* A, cudaDataType Atype, int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
    long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  const auto real = fp8scope::hook::cublas_api().gemm_strided_batched_ex;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  HookRuntime* hook = guard.observe() ? HookRuntime::get() : nullptr;
  const std::optional<PendingOutput> output =
      hook != nullptr ? hook->observe_cublas("cublasGemmStridedBatchedEx", transa, transb, m, n, k, A, Atype, lda,
                                             strideA, B, Btype, ldb, strideB, CublasOutput{C, Ctype, ldc, strideC},
                                             batchCount, handle)
                      : std::nullopt;
  const cublasStatus_t status = real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                                     strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
  if (output && status == CUBLAS_STATUS_SUCCESS) hook->sample_output(*output);
  return status;
}

// Batched and grouped GEMMs (mixture-of-experts layers): each batch element or problem is an
// expert, its matrices reached through device arrays of pointers.
extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
    const void* const Aarray[], cudaDataType Atype, int lda, const void* const Barray[], cudaDataType Btype, int ldb,
    const void* beta, void* const Carray[], cudaDataType Ctype, int ldc, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  const auto real = fp8scope::hook::cublas_api().gemm_batched_ex;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  if (guard.observe()) {
    if (HookRuntime* hook = HookRuntime::get()) {
      hook->observe_cublas_batched("cublasGemmBatchedEx", transa, transb, m, n, k, Aarray, Atype, lda, Barray, Btype,
                                   ldb, batchCount, handle);
    }
  }
  return real(handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray, Ctype, ldc,
              batchCount, computeType, algo);
}

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmBatchedEx_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
    const void* alpha, const void* const Aarray[], cudaDataType Atype, int64_t lda, const void* const Barray[],
    cudaDataType Btype, int64_t ldb, const void* beta, void* const Carray[], cudaDataType Ctype, int64_t ldc,
    int64_t batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  const auto real = fp8scope::hook::cublas_api().gemm_batched_ex_64;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  if (guard.observe()) {
    if (HookRuntime* hook = HookRuntime::get()) {
      hook->observe_cublas_batched("cublasGemmBatchedEx_64", transa, transb, m, n, k, Aarray, Atype, lda, Barray,
                                   Btype, ldb, batchCount, handle);
    }
  }
  return real(handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray, Ctype, ldc,
              batchCount, computeType, algo);
}

namespace {

// cublasGemmGroupedBatchedEx's host arrays (cuBLAS documentation, cublasGemmGroupedBatchedEx: all
// host memory, group_count entries), widened; nothing when an array is missing.
template <class I>
std::optional<fp8scope::hook::GroupedProblems> grouped_problems(const cublasOperation_t* transa,
                                                                const cublasOperation_t* transb, const I* m, const I* n,
                                                                const I* k, const I* lda, const I* ldb, I group_count,
                                                                const I* group_size) {
  if (transa == nullptr || transb == nullptr || m == nullptr || n == nullptr || k == nullptr || lda == nullptr ||
      ldb == nullptr || group_size == nullptr || group_count <= 0) {
    return std::nullopt;
  }
  fp8scope::hook::GroupedProblems g;
  for (I i = 0; i < group_count; ++i) {
    g.transa.push_back(transa[i] != CUBLAS_OP_N);
    g.transb.push_back(transb[i] != CUBLAS_OP_N);
    g.m.push_back(m[i]);
    g.n.push_back(n[i]);
    g.k.push_back(k[i]);
    g.lda.push_back(lda[i]);
    g.ldb.push_back(ldb[i]);
    g.group_size.push_back(group_size[i]);
  }
  return g;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[], const cublasOperation_t transb_array[],
    const int m_array[], const int n_array[], const int k_array[], const void* alpha_array, const void* const Aarray[],
    cudaDataType_t Atype, const int lda_array[], const void* const Barray[], cudaDataType_t Btype,
    const int ldb_array[], const void* beta_array, void* const Carray[], cudaDataType_t Ctype, const int ldc_array[],
    int group_count, const int group_size[], cublasComputeType_t computeType) {
  const auto real = fp8scope::hook::cublas_api().gemm_grouped_batched_ex;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  if (guard.observe()) {
    if (HookRuntime* hook = HookRuntime::get()) {
      hook->observe_cublas_grouped("cublasGemmGroupedBatchedEx",
                                   grouped_problems(transa_array, transb_array, m_array, n_array, k_array, lda_array,
                                                    ldb_array, group_count, group_size),
                                   Aarray, Atype, Barray, Btype, handle);
    }
  }
  return real(handle, transa_array, transb_array, m_array, n_array, k_array, alpha_array, Aarray, Atype, lda_array,
              Barray, Btype, ldb_array, beta_array, Carray, Ctype, ldc_array, group_count, group_size, computeType);
}

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasGemmGroupedBatchedEx_64(
    cublasHandle_t handle, const cublasOperation_t transa_array[], const cublasOperation_t transb_array[],
    const int64_t m_array[], const int64_t n_array[], const int64_t k_array[], const void* alpha_array,
    const void* const Aarray[], cudaDataType_t Atype, const int64_t lda_array[], const void* const Barray[],
    cudaDataType_t Btype, const int64_t ldb_array[], const void* beta_array, void* const Carray[], cudaDataType_t Ctype,
    const int64_t ldc_array[], int64_t group_count, const int64_t group_size[], cublasComputeType_t computeType) {
  const auto real = fp8scope::hook::cublas_api().gemm_grouped_batched_ex_64;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CallGuard guard;
  if (guard.observe()) {
    if (HookRuntime* hook = HookRuntime::get()) {
      hook->observe_cublas_grouped("cublasGemmGroupedBatchedEx_64",
                                   grouped_problems(transa_array, transb_array, m_array, n_array, k_array, lda_array,
                                                    ldb_array, group_count, group_size),
                                   Aarray, Atype, Barray, Btype, handle);
    }
  }
  return real(handle, transa_array, transb_array, m_array, n_array, k_array, alpha_array, Aarray, Atype, lda_array,
              Barray, Btype, ldb_array, beta_array, Carray, Ctype, ldc_array, group_count, group_size, computeType);
}
