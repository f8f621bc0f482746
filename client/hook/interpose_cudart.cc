// The CUDA runtime's graph entry points, interposed (DESIGN.md "Graphs"): PyTorch's CUDA graphs,
// TE's make_graphed_callables and torch.compile's reduce-overhead mode capture and replay through
// libcudart, which reaches the driver through entry points it resolves itself (cuGetProcAddress
// from inside the library), so only its own API can be interposed. Same events as the driver's
// (interpose_graphs.cc, graph_interposition.h); a runtime that calls the driver's interposed
// functions after all is seen once, at the outermost call. The runtime's graph, exec and stream
// handles are the driver's (cudaGraph_t is CUgraph).
//
// NVIDIA's CUDA Runtime API reference, https://docs.nvidia.com/cuda/cuda-runtime-api/:
// group__CUDART__STREAM.html (cudaStreamBeginCapture, cudaStreamBeginCaptureToGraph,
// cudaStreamEndCapture) and group__CUDART__GRAPH.html (cudaGraphInstantiate(WithFlags/WithParams),
// cudaGraphExecUpdate, cudaGraphClone, cudaGraphAddChildGraphNode, cudaGraphDestroy,
// cudaGraphExecDestroy, cudaGraphLaunch), each the runtime's form of the driver call of its name.
// Signatures are CUDA 12's and 13's (libcudart.so.12 and .13); the _ptsz variants are what a
// program built with --default-stream per-thread calls.
#include <cuda_runtime_api.h>

#include "fp8scope/hook/graph_interposition.h"

namespace gi = fp8scope::hook::graph_interposition;

namespace {

template <class F>
F below(const char* symbol) {
  for (const char* soname : {"libcudart.so.13", "libcudart.so.12"}) {
    if (void* f = gi::next_definition(symbol, soname)) return reinterpret_cast<F>(f);
  }
  return nullptr;
}

}  // namespace

#define FP8SCOPE_REAL(name, type) ([] {                 \
  static const auto f = below<type>(#name);             \
  return f;                                             \
}())
#define FP8SCOPE_CALL(name, type, how, ...)                 \
  const auto real = FP8SCOPE_REAL(name, type);              \
  if (real == nullptr) return cudaErrorInitializationError; \
  return gi::how(real, __VA_ARGS__)

#define FP8SCOPE_EXPORT extern "C" __attribute__((visibility("default")))

using BeginCapture = cudaError_t (*)(cudaStream_t, cudaStreamCaptureMode);
using BeginCaptureToGraph = cudaError_t (*)(cudaStream_t, cudaGraph_t, const cudaGraphNode_t*, const cudaGraphEdgeData*,
                                            size_t, cudaStreamCaptureMode);
using EndCapture = cudaError_t (*)(cudaStream_t, cudaGraph_t*);
using InstantiateWithFlags = cudaError_t (*)(cudaGraphExec_t*, cudaGraph_t, unsigned long long);
using InstantiateWithParams = cudaError_t (*)(cudaGraphExec_t*, cudaGraph_t, cudaGraphInstantiateParams*);
using ExecUpdate = cudaError_t (*)(cudaGraphExec_t, cudaGraph_t, cudaGraphExecUpdateResultInfo*);
using ExecDestroy = cudaError_t (*)(cudaGraphExec_t);
using GraphDestroy = cudaError_t (*)(cudaGraph_t);
using GraphClone = cudaError_t (*)(cudaGraph_t*, cudaGraph_t);
using AddChildGraphNode = cudaError_t (*)(cudaGraphNode_t*, cudaGraph_t, const cudaGraphNode_t*, size_t, cudaGraph_t);
using Launch = cudaError_t (*)(cudaGraphExec_t, cudaStream_t);

FP8SCOPE_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  FP8SCOPE_CALL(cudaStreamBeginCapture, BeginCapture, begin_capture, stream, mode);
}
FP8SCOPE_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  FP8SCOPE_CALL(cudaStreamBeginCapture_ptsz, BeginCapture, begin_capture, stream, mode);
}
FP8SCOPE_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                          const cudaGraphNode_t* dependencies,
                                                          const cudaGraphEdgeData* edges, size_t count,
                                                          cudaStreamCaptureMode mode) {
  FP8SCOPE_CALL(cudaStreamBeginCaptureToGraph, BeginCaptureToGraph, begin_capture, stream, graph, dependencies, edges,
                count, mode);
}
FP8SCOPE_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                               const cudaGraphNode_t* dependencies,
                                                               const cudaGraphEdgeData* edges, size_t count,
                                                               cudaStreamCaptureMode mode) {
  FP8SCOPE_CALL(cudaStreamBeginCaptureToGraph_ptsz, BeginCaptureToGraph, begin_capture, stream, graph, dependencies,
                edges, count, mode);
}
FP8SCOPE_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  FP8SCOPE_CALL(cudaStreamEndCapture, EndCapture, end_capture, stream, graph);
}
FP8SCOPE_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  FP8SCOPE_CALL(cudaStreamEndCapture_ptsz, EndCapture, end_capture, stream, graph);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  FP8SCOPE_CALL(cudaGraphInstantiate, InstantiateWithFlags, instantiate, exec, graph, flags);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                          unsigned long long flags) {
  FP8SCOPE_CALL(cudaGraphInstantiateWithFlags, InstantiateWithFlags, instantiate, exec, graph, flags);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                           cudaGraphInstantiateParams* params) {
  FP8SCOPE_CALL(cudaGraphInstantiateWithParams, InstantiateWithParams, instantiate, exec, graph, params);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                                cudaGraphInstantiateParams* params) {
  FP8SCOPE_CALL(cudaGraphInstantiateWithParams_ptsz, InstantiateWithParams, instantiate, exec, graph, params);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                                cudaGraphExecUpdateResultInfo* info) {
  FP8SCOPE_CALL(cudaGraphExecUpdate, ExecUpdate, update, exec, graph, info);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  FP8SCOPE_CALL(cudaGraphExecDestroy, ExecDestroy, destroy_exec, exec);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  FP8SCOPE_CALL(cudaGraphDestroy, GraphDestroy, destroy_graph, graph);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphClone(cudaGraph_t* copy, cudaGraph_t original) {
  FP8SCOPE_CALL(cudaGraphClone, GraphClone, clone, copy, original);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                       const cudaGraphNode_t* dependencies, size_t count,
                                                       cudaGraph_t child) {
  FP8SCOPE_CALL(cudaGraphAddChildGraphNode, AddChildGraphNode, add_child_graph, node, graph, dependencies, count, child);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  FP8SCOPE_CALL(cudaGraphLaunch, Launch, launch, exec, stream);
}
FP8SCOPE_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  FP8SCOPE_CALL(cudaGraphLaunch_ptsz, Launch, launch, exec, stream);
}
