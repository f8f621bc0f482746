// The hook's state, created on first use (the first intercepted GEMM or C API call) and never
// destroyed: the step clock, the sampler, the shipper link and the capture path. The interposed
// functions call observe_*() before passing the call on; those return quickly on unsampled steps.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/capture.h"
#include "fp8scope/hook/gemm_operands.h"
#include "fp8scope/hook/layer_names.h"
#include "fp8scope/hook/sampler.h"
#include "fp8scope/hook/shipper_link.h"
#include "fp8scope/hook/step_clock.h"
#include "fp8scope/hook/te_casts.h"

namespace fp8scope::hook {

// A GEMM's output the policy selected: copied once the real call is on its stream (or in the
// capture), so the copy reads what the GEMM wrote.
struct PendingOutput {
  std::uint64_t step = 0;
  std::string layer;
  GemmRole role = GemmRole::kUnknown;
  const char* source = "";
  OperandView view;
  CUstream stream = nullptr;
  std::optional<DriverApi::CaptureInfo> capture;  // recorded into this capture, after GEMM `gemm`
  std::size_t gemm = 0;
};

class HookRuntime {
 public:
  // The runtime, or null when the hook is disabled (FP8SCOPE_DISABLE=1, a forked child, exiting).
  static HookRuntime* get();
  // The runtime only if it already exists (NVTX ranges and steps must not start a shipper).
  static HookRuntime* existing();

  // The single-matrix GEMMs: their output, when selected, for sample_output() after the real call.
  std::optional<PendingOutput> observe_cublaslt(cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                                cublasLtMatrixLayout_t Adesc, const void* B,
                                                cublasLtMatrixLayout_t Bdesc, const void* D,
                                                cublasLtMatrixLayout_t Ddesc, CUstream stream);
  std::optional<PendingOutput> observe_cublas(const char* source, cublasOperation_t transa, cublasOperation_t transb,
                                              int m, int n, int k, const void* A, cudaDataType Atype, int lda,
                                              long long strideA, const void* B, cudaDataType Btype, int ldb,
                                              long long strideB, const CublasOutput& C, int batch_count,
                                              cublasHandle_t handle);
  // After the real call succeeded: the copy of its output, on its stream or into its capture.
  void sample_output(const PendingOutput& output);
  void observe_cublas_batched(const char* source, cublasOperation_t transa, cublasOperation_t transb, std::int64_t m,
                              std::int64_t n, std::int64_t k, const void* Aarray, cudaDataType Atype, std::int64_t lda,
                              const void* Barray, cudaDataType Btype, std::int64_t ldb, std::int64_t batch_count,
                              cublasHandle_t handle);
  void observe_cublas_grouped(const char* source, const std::optional<GroupedProblems>& problems, const void* Aarray,
                              cudaDataType Atype, const void* Barray, cudaDataType Btype, cublasHandle_t handle);

  // A Transformer Engine cast, after the real call returned (te_casts.cc): on a step that is or
  // may be sampled, its input waits in the cast stash for the GEMM that reads its output.
  void observe_cast(const TeCastCall& call);

  // A replay of an instantiated CUDA graph (graph_events.h): when it runs copies the hook recorded
  // at capture and its step is sampled, they are planned around `real`.
  CUresult graph_launch(CUgraphExec exec, CUstream stream, GraphLaunch real);
  GraphRecorder& graphs() { return capture_.graphs(); }

  void step(std::uint64_t step);
  void scalar(const char* name, std::uint64_t step, double value);
  StepClock& clock() { return clock_; }
  const std::string& step_range() const { return step_range_; }

  // Process exit: stop sampling, let queued records reach the ring.
  void shutdown();

 private:
  HookRuntime();
  // Everything after the step check, for a GEMM whose step is sampled: one matrix per operand, or
  // for a batched or grouped GEMM the chosen experts' matrices.
  void sample(const GemmCall& call, std::uint64_t step, const GemmName& name, TensorSelection tensors);
  void sample_experts(const GemmCall& call, std::uint64_t step, const GemmName& name, TensorSelection tensors);
  // cuBLAS calls: after the step check, name, read (read_call()) and sample.
  template <class Read>
  std::optional<PendingOutput> observe_cublas_call(std::uint64_t signature, bool transa, bool transb, bool grouped,
                                                   cublasHandle_t handle, Read read_call);
  // A GEMM on a stream under capture: named, its selectable operands recorded into the graph
  // (graph_recorder.h). `read` reads the call as the sampled path does.
  template <class Read>
  std::optional<PendingOutput> observe_captured(const DriverApi::CaptureInfo& capture, std::uint64_t signature,
                                                bool transa, bool transb, Read read);
  // The call's output when the selection takes it; counted when it cannot be copied.
  std::optional<PendingOutput> output_of(const GemmCall& call, std::uint64_t step, const GemmName& name,
                                         TensorSelection tensors);
  // At capture: the nodes of a batched or grouped GEMM's experts (Capture::record_expert).
  void record_experts(const DriverApi::CaptureInfo& capture, std::size_t gemm, const GemmCall& call,
                      const GemmName& name, TensorSelection tensors);
  // The capture a call's stream is in, when any capture is in flight.
  std::optional<DriverApi::CaptureInfo> captured(CUstream stream);
  // What a sample of one operand of the call says, but its expert of a batched or grouped GEMM.
  static SampleSpec operand_spec(const GemmCall& call, std::uint64_t step, const GemmName& name, const OperandView& view,
                                 Operand kind);
  // A cast of Transformer Engine's as the stash or a graph keeps it; the reason when it cannot be read.
  std::optional<CastToStash> read_cast(const TeCastCall& call, std::uint64_t step, shm::DropReason& dropped);
  void count(shm::DropReason reason, std::uint64_t n = 1) { shm::count_drop(link_.segment(), reason, n); }
  // Whether a cast (and its step) may be sampled: the step, or with steps found from the GEMMs'
  // signatures the next one too (a step's first casts come before its first GEMM).
  bool cast_step_selected(std::uint64_t step);

  std::string step_range_;
  StepClock clock_;
  std::atomic<std::int64_t> last_step_record_ns_{0};
  // Transformer Engine's casts are interposed in this process: an FP8 or FP4 operand without its
  // cast is then `cast_uncovered`.
  std::atomic<bool> te_casts_seen_{false};
  ShipperLink link_;
  Sampler sampler_;
  Capture capture_;
};

// Set in the library constructor: the step range name from FP8SCOPE_STEP_RANGE, for the NVTX
// handlers, which may run before the runtime exists.
const std::string& configured_step_range();

}  // namespace fp8scope::hook
