#include "fp8scope/hook/real_api.h"

#include <dlfcn.h>

#include <type_traits>

namespace fp8scope::hook {
namespace {

// cuda.h maps names to versioned symbols with macros (cuMemAlloc -> cuMemAlloc_v2): stringify
// after expansion so we ask for the symbol the application itself links against.
#define FP8SCOPE_SYMBOL_NAME_(x) #x
#define FP8SCOPE_SYMBOL_NAME(x) FP8SCOPE_SYMBOL_NAME_(x)

void* next_or_loaded(const char* symbol, const char* const* sonames) {
  if (void* f = dlsym(RTLD_NEXT, symbol)) return f;
  for (const char* const* so = sonames; *so != nullptr; ++so) {
    // RTLD_NOLOAD: only a library the application already loaded; the hook loads no cuBLAS.
    if (void* h = dlopen(*so, RTLD_NOW | RTLD_NOLOAD)) {
      void* f = dlsym(h, symbol);
      dlclose(h);
      if (f != nullptr) return f;
    }
  }
  return nullptr;
}

template <class F>
void resolve(F& target, const char* symbol, const char* const* sonames) {
  target = reinterpret_cast<F>(next_or_loaded(symbol, sonames));
}

}  // namespace

bool DriverApi::complete() const {
  return ctx_get_current && ctx_set_current && mem_alloc && mem_free && memcpy_2d_async && memcpy_dtod_async &&
         memcpy_dtoh_async && mem_host_register && stream_create && stream_wait_event && stream_is_capturing &&
         event_create && event_record && event_synchronize && event_destroy;
}

std::optional<DriverApi::CaptureInfo> DriverApi::capture_of(CUstream stream) const {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (capture_info_v3 != nullptr) {
    r = capture_info_v3(stream, &status, &id, &graph, nullptr, nullptr, nullptr);
  } else if (capture_info_v2 != nullptr) {
    r = capture_info_v2(stream, &status, &id, &graph, nullptr, nullptr);
  }
  if (r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return std::nullopt;
  return CaptureInfo{id, graph};
}

const CublasLtApi& cublaslt_api() {
  static const CublasLtApi api = [] {
    static const char* const kSonames[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", nullptr};
    CublasLtApi a;
    resolve(a.matmul, "cublasLtMatmul", kSonames);
    resolve(a.layout_get, "cublasLtMatrixLayoutGetAttribute", kSonames);
    resolve(a.desc_get, "cublasLtMatmulDescGetAttribute", kSonames);
    resolve(a.version, "cublasLtGetVersion", kSonames);
    return a;
  }();
  return api;
}

const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    static const char* const kSonames[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", nullptr};
    CublasApi a;
    resolve(a.gemm_ex, "cublasGemmEx", kSonames);
    resolve(a.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx", kSonames);
    resolve(a.gemm_batched_ex, "cublasGemmBatchedEx", kSonames);
    resolve(a.gemm_batched_ex_64, "cublasGemmBatchedEx_64", kSonames);
    resolve(a.gemm_grouped_batched_ex, "cublasGemmGroupedBatchedEx", kSonames);
    resolve(a.gemm_grouped_batched_ex_64, "cublasGemmGroupedBatchedEx_64", kSonames);
    resolve(a.get_stream, "cublasGetStream_v2", kSonames);
    return a;
  }();
  return api;
}

const DriverApi& driver_api() {
  static const DriverApi api = [] {
    DriverApi a;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return a;  // the application has not loaded the driver: nothing to sample
    auto get = [h](auto& target, const char* symbol) { target = reinterpret_cast<std::remove_reference_t<decltype(target)>>(dlsym(h, symbol)); };
    get(a.ctx_get_current, FP8SCOPE_SYMBOL_NAME(cuCtxGetCurrent));
    get(a.ctx_set_current, FP8SCOPE_SYMBOL_NAME(cuCtxSetCurrent));
    get(a.mem_alloc, FP8SCOPE_SYMBOL_NAME(cuMemAlloc));
    get(a.mem_free, FP8SCOPE_SYMBOL_NAME(cuMemFree));
    get(a.memcpy_2d_async, FP8SCOPE_SYMBOL_NAME(cuMemcpy2DAsync));
    get(a.memcpy_dtod_async, FP8SCOPE_SYMBOL_NAME(cuMemcpyDtoDAsync));
    get(a.memcpy_dtoh_async, FP8SCOPE_SYMBOL_NAME(cuMemcpyDtoHAsync));
    get(a.mem_host_register, FP8SCOPE_SYMBOL_NAME(cuMemHostRegister));
    get(a.stream_create, FP8SCOPE_SYMBOL_NAME(cuStreamCreate));
    get(a.stream_wait_event, FP8SCOPE_SYMBOL_NAME(cuStreamWaitEvent));
    get(a.stream_is_capturing, FP8SCOPE_SYMBOL_NAME(cuStreamIsCapturing));
    get(a.event_create, FP8SCOPE_SYMBOL_NAME(cuEventCreate));
    get(a.event_record, FP8SCOPE_SYMBOL_NAME(cuEventRecord));
    get(a.event_synchronize, FP8SCOPE_SYMBOL_NAME(cuEventSynchronize));
    get(a.event_destroy, FP8SCOPE_SYMBOL_NAME(cuEventDestroy));
    get(a.module_load_data, FP8SCOPE_SYMBOL_NAME(cuModuleLoadData));
    get(a.module_get_function, FP8SCOPE_SYMBOL_NAME(cuModuleGetFunction));
    get(a.launch_kernel, FP8SCOPE_SYMBOL_NAME(cuLaunchKernel));
    get(a.memset_d8_async, FP8SCOPE_SYMBOL_NAME(cuMemsetD8Async));
    get(a.event_query, FP8SCOPE_SYMBOL_NAME(cuEventQuery));
    get(a.exchange_capture_mode, FP8SCOPE_SYMBOL_NAME(cuThreadExchangeStreamCaptureMode));
    get(a.capture_info_v3, FP8SCOPE_SYMBOL_NAME(cuStreamGetCaptureInfo));
    get(a.capture_info_v2, "cuStreamGetCaptureInfo_v2");
    return a;  // the handle stays open: the functions must outlive this scope
  }();
  return api;
}

}  // namespace fp8scope::hook
