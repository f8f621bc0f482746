// cublasLtMatmul, interposed: guard, observe, then the real call with the caller's arguments
// untouched, and after it a copy of its output where the policy asks for one. Its status is
// returned as is; the hook never changes a result.
#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/hook_runtime.h"
#include "fp8scope/hook/real_api.h"

using fp8scope::hook::CallGuard;
using fp8scope::hook::HookRuntime;

extern "C" __attribute__((visibility("default"))) cublasStatus_t cublasLtMatmul(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
    const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
    cudaStream_t stream) {
  const auto real = fp8scope::hook::cublaslt_api().matmul;
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;  // no library below us: nothing to call
  CallGuard guard;
  HookRuntime* hook = guard.observe() ? HookRuntime::get() : nullptr;
  const std::optional<fp8scope::hook::PendingOutput> output =
      hook != nullptr ? hook->observe_cublaslt(desc, alpha, A, Adesc, B, Bdesc, D, Ddesc, stream) : std::nullopt;
  const cublasStatus_t status = real(handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                                     workspace_bytes, stream);
  if (output && status == CUBLAS_STATUS_SUCCESS) hook->sample_output(*output);
  return status;
}
