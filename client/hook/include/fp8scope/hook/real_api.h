// The real entry points below the hook, resolved at run time, never linked (DESIGN.md: any CUDA
// 12.x/13.x of the job works, and a process without CUDA loads the hook harmlessly). cuBLAS
// functions come from the next object in lookup order (dlsym RTLD_NEXT), falling back to the
// already loaded libcublasLt/libcublas; driver functions from libcuda.so.1. A missing function is
// null: the callers then pass calls through untouched and sample nothing.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>

#include <cstdint>
#include <optional>

namespace fp8scope::hook {

struct CublasLtApi {
  decltype(&::cublasLtMatmul) matmul = nullptr;
  decltype(&::cublasLtMatrixLayoutGetAttribute) layout_get = nullptr;
  decltype(&::cublasLtMatmulDescGetAttribute) desc_get = nullptr;
  decltype(&::cublasLtGetVersion) version = nullptr;
};

// Spelled out: cublas_api.h overloads these two in C++ (inline wrappers taking cudaDataType).
using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                          const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                        int, const void*, const void*, cudaDataType, int, long long,
                                                        const void*, cudaDataType, int, long long, const void*, void*,
                                                        cudaDataType, int, long long, int, cublasComputeType_t,
                                                        cublasGemmAlgo_t);

using CublasGemmBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                 const void*, const void* const[], cudaDataType, int, const void* const[],
                                                 cudaDataType, int, const void*, void* const[], cudaDataType, int, int,
                                                 cublasComputeType_t, cublasGemmAlgo_t);

struct CublasApi {
  CublasGemmExFn gemm_ex = nullptr;
  CublasGemmStridedBatchedExFn gemm_strided_batched_ex = nullptr;
  CublasGemmBatchedExFn gemm_batched_ex = nullptr;
  decltype(&::cublasGemmBatchedEx_64) gemm_batched_ex_64 = nullptr;
  decltype(&::cublasGemmGroupedBatchedEx) gemm_grouped_batched_ex = nullptr;
  decltype(&::cublasGemmGroupedBatchedEx_64) gemm_grouped_batched_ex_64 = nullptr;
  decltype(&::cublasGetStream_v2) get_stream = nullptr;
};

// cuStreamGetCaptureInfo as CUDA 11.3-12.2 drivers export it (12.3 added _v3 with edge data).
using StreamGetCaptureInfoV2Fn = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                              const CUgraphNode**, size_t*);

// The driver calls the hook makes to copy operands out (names as cuda.h maps them, e.g. _v2).
struct DriverApi {
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuMemAlloc) mem_alloc = nullptr;
  decltype(&::cuMemFree) mem_free = nullptr;
  decltype(&::cuMemcpy2DAsync) memcpy_2d_async = nullptr;
  decltype(&::cuMemcpyDtoDAsync) memcpy_dtod_async = nullptr;
  decltype(&::cuMemcpyDtoHAsync) memcpy_dtoh_async = nullptr;
  decltype(&::cuMemHostRegister) mem_host_register = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamWaitEvent) stream_wait_event = nullptr;
  decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventSynchronize) event_synchronize = nullptr;
  decltype(&::cuEventDestroy) event_destroy = nullptr;
  // The gather kernel's (capture.h); without them, batched and grouped GEMMs are not sampled.
  decltype(&::cuModuleLoadData) module_load_data = nullptr;
  decltype(&::cuModuleGetFunction) module_get_function = nullptr;
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  // CUDA graphs (graph_recorder.h).
  decltype(&::cuMemsetD8Async) memset_d8_async = nullptr;
  decltype(&::cuEventQuery) event_query = nullptr;
  decltype(&::cuThreadExchangeStreamCaptureMode) exchange_capture_mode = nullptr;
  decltype(&::cuStreamGetCaptureInfo) capture_info_v3 = nullptr;
  StreamGetCaptureInfoV2Fn capture_info_v2 = nullptr;

  bool complete() const;
  // The capture `stream` is in: its id and the graph it records into; nothing when it is not
  // capturing (or the driver cannot say).
  struct CaptureInfo {
    std::uint64_t id;
    CUgraph graph;
  };
  std::optional<CaptureInfo> capture_of(CUstream stream) const;
};

// The calling thread's stream capture mode, relaxed while this lives: the hook's set-up (allocating,
// loading its kernels) and its publisher's waits are what the driver calls "potentially unsafe",
// which a capture in global mode on any thread, or in thread-local mode on this one, prohibits:
// made then, they would fail and invalidate the application's capture
// (cuThreadExchangeStreamCaptureMode, CUDA Driver API, group__CUDA__STREAM.html).
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const DriverApi& cu) : cu_(cu) {
    if (cu_.exchange_capture_mode != nullptr) exchanged_ = cu_.exchange_capture_mode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureMode() {
    if (exchanged_) cu_.exchange_capture_mode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  const DriverApi& cu_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

// Resolved on first use (thread-safe), then constant.
const CublasLtApi& cublaslt_api();
const CublasApi& cublas_api();
const DriverApi& driver_api();

}  // namespace fp8scope::hook
