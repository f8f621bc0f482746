// The driver's CUDA graph entry points, interposed (DESIGN.md "Graphs"): stream capture begins and
// ends, graphs are instantiated, updated, cloned, nested and destroyed, and replays are launched
// (graph_interposition.h). Every exported variant is here, under its exported name: the ones
// cuda.h maps the plain names to (_v2, WithFlags), the older ABIs still exported under the plain
// names, and the per-thread-default-stream ones (_ptsz). cuda.h is included with its internal
// switch so those names are not rewritten.
//
// A caller that reaches the driver through cuGetProcAddress rather than the PLT gets these too:
// when the driver returns one of the functions below, the hook returns its own in its place.
// (The CUDA runtime resolves its entry points inside libcudart, where no preload reaches them:
// interpose_cudart.cc covers it at its own API.)
//
// NVIDIA's CUDA Driver API reference, https://docs.nvidia.com/cuda/cuda-driver-api/:
//   group__CUDA__STREAM.html: cuStreamBeginCapture ("Begins graph capture on a stream"),
//     cuStreamBeginCaptureToGraph, cuStreamEndCapture ("Ends capture on hStream, returning the
//     captured graph"; an invalidated capture returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and
//     no graph), cuStreamGetCaptureInfo (the capture's unique id and the graph captured into).
//   group__CUDA__GRAPH.html: cuGraphInstantiate(WithFlags/WithParams), cuGraphExecUpdate
//     ("Updates the node parameters in the instantiated graph ... with the node parameters in a
//     topologically identical graph"), cuGraphClone, cuGraphAddChildGraphNode (the child graph is
//     cloned into the node), cuGraphDestroy, cuGraphExecDestroy ("If the executable graph is
//     in-flight, it will not be terminated, but rather freed asynchronously on completion"),
//     cuGraphLaunch ("Each launch is ordered behind both any previous work in hStream and any
//     previous launches of hGraphExec").
//   group__CUDA__DRIVER__ENTRY__POINT.html: cuGetProcAddress ("Returns the requested driver API
//     function pointer").
#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>

#include "fp8scope/hook/graph_interposition.h"

namespace gi = fp8scope::hook::graph_interposition;

namespace {

template <class F>
F below(const char* symbol) {
  return reinterpret_cast<F>(gi::next_definition(symbol, "libcuda.so.1"));
}

}  // namespace

// The real `name`, resolved on first use; a call with nothing below answers "not initialized".
#define FP8SCOPE_REAL(name) ([] {                                         \
  static const auto f = below<decltype(&::name)>(#name);                  \
  return f;                                                               \
}())
#define FP8SCOPE_CALL(name, how, ...)                                                         \
  const auto real = FP8SCOPE_REAL(name);                                                      \
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                     \
  return gi::how(real, __VA_ARGS__)

#define FP8SCOPE_EXPORT extern "C" __attribute__((visibility("default")))

FP8SCOPE_EXPORT CUresult cuStreamBeginCapture(CUstream stream) {
  FP8SCOPE_CALL(cuStreamBeginCapture, begin_capture, stream);
}
FP8SCOPE_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream stream) {
  FP8SCOPE_CALL(cuStreamBeginCapture_ptsz, begin_capture, stream);
}
FP8SCOPE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  FP8SCOPE_CALL(cuStreamBeginCapture_v2, begin_capture, stream, mode);
}
FP8SCOPE_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  FP8SCOPE_CALL(cuStreamBeginCapture_v2_ptsz, begin_capture, stream, mode);
}
FP8SCOPE_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                                                     const CUgraphEdgeData* edges, size_t count,
                                                     CUstreamCaptureMode mode) {
  FP8SCOPE_CALL(cuStreamBeginCaptureToGraph, begin_capture, stream, graph, dependencies, edges, count, mode);
}
FP8SCOPE_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph,
                                                          const CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                                                          size_t count, CUstreamCaptureMode mode) {
  FP8SCOPE_CALL(cuStreamBeginCaptureToGraph_ptsz, begin_capture, stream, graph, dependencies, edges, count, mode);
}
FP8SCOPE_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  FP8SCOPE_CALL(cuStreamEndCapture, end_capture, stream, graph);
}
FP8SCOPE_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  FP8SCOPE_CALL(cuStreamEndCapture_ptsz, end_capture, stream, graph);
}

// Before CUDA 12, under the plain names: an error node and a log buffer instead of flags.
FP8SCOPE_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                            size_t log_bytes) {
  FP8SCOPE_CALL(cuGraphInstantiate, instantiate, exec, graph, error_node, log, log_bytes);
}
FP8SCOPE_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                               size_t log_bytes) {
  FP8SCOPE_CALL(cuGraphInstantiate_v2, instantiate, exec, graph, error_node, log, log_bytes);
}
FP8SCOPE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  FP8SCOPE_CALL(cuGraphInstantiateWithFlags, instantiate, exec, graph, flags);
}
FP8SCOPE_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  FP8SCOPE_CALL(cuGraphInstantiateWithParams, instantiate, exec, graph, params);
}
FP8SCOPE_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                           CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  FP8SCOPE_CALL(cuGraphInstantiateWithParams_ptsz, instantiate, exec, graph, params);
}
// CUDA 11's, under the plain name: an error node and a result code instead of the result info.
FP8SCOPE_EXPORT CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
                                           CUgraphExecUpdateResult* result) {
  FP8SCOPE_CALL(cuGraphExecUpdate, update, exec, graph, error_node, result);
}
FP8SCOPE_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  FP8SCOPE_CALL(cuGraphExecUpdate_v2, update, exec, graph, info);
}
FP8SCOPE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) { FP8SCOPE_CALL(cuGraphExecDestroy, destroy_exec, exec); }
FP8SCOPE_EXPORT CUresult cuGraphDestroy(CUgraph graph) { FP8SCOPE_CALL(cuGraphDestroy, destroy_graph, graph); }
FP8SCOPE_EXPORT CUresult cuGraphClone(CUgraph* copy, CUgraph original) {
  FP8SCOPE_CALL(cuGraphClone, clone, copy, original);
}
FP8SCOPE_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                                  size_t count, CUgraph child) {
  FP8SCOPE_CALL(cuGraphAddChildGraphNode, add_child_graph, node, graph, dependencies, count, child);
}
FP8SCOPE_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  FP8SCOPE_CALL(cuGraphLaunch, launch, exec, stream);
}
FP8SCOPE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  FP8SCOPE_CALL(cuGraphLaunch_ptsz, launch, exec, stream);
}

namespace {

// The hook's function in place of the driver's `real`, when it interposes that one.
void* interposed(void* real) {
  if (real == nullptr) return nullptr;
#define FP8SCOPE_SUBSTITUTE(name) \
  if (real == reinterpret_cast<void*>(FP8SCOPE_REAL(name))) return reinterpret_cast<void*>(&::name);
  FP8SCOPE_SUBSTITUTE(cuStreamBeginCapture)
  FP8SCOPE_SUBSTITUTE(cuStreamBeginCapture_ptsz)
  FP8SCOPE_SUBSTITUTE(cuStreamBeginCapture_v2)
  FP8SCOPE_SUBSTITUTE(cuStreamBeginCapture_v2_ptsz)
  FP8SCOPE_SUBSTITUTE(cuStreamBeginCaptureToGraph)
  FP8SCOPE_SUBSTITUTE(cuStreamBeginCaptureToGraph_ptsz)
  FP8SCOPE_SUBSTITUTE(cuStreamEndCapture)
  FP8SCOPE_SUBSTITUTE(cuStreamEndCapture_ptsz)
  FP8SCOPE_SUBSTITUTE(cuGraphInstantiate)
  FP8SCOPE_SUBSTITUTE(cuGraphInstantiate_v2)
  FP8SCOPE_SUBSTITUTE(cuGraphInstantiateWithFlags)
  FP8SCOPE_SUBSTITUTE(cuGraphInstantiateWithParams)
  FP8SCOPE_SUBSTITUTE(cuGraphInstantiateWithParams_ptsz)
  FP8SCOPE_SUBSTITUTE(cuGraphExecUpdate)
  FP8SCOPE_SUBSTITUTE(cuGraphExecUpdate_v2)
  FP8SCOPE_SUBSTITUTE(cuGraphExecDestroy)
  FP8SCOPE_SUBSTITUTE(cuGraphDestroy)
  FP8SCOPE_SUBSTITUTE(cuGraphClone)
  FP8SCOPE_SUBSTITUTE(cuGraphAddChildGraphNode)
  FP8SCOPE_SUBSTITUTE(cuGraphLaunch)
  FP8SCOPE_SUBSTITUTE(cuGraphLaunch_ptsz)
#undef FP8SCOPE_SUBSTITUTE
  return real;
}

}  // namespace

// CUDA 11.3's, and _v2 (12.0) with the status of the lookup.
FP8SCOPE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  const auto real = FP8SCOPE_REAL(cuGetProcAddress);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = interposed(*pfn);
  return r;
}
FP8SCOPE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* status) {
  const auto real = FP8SCOPE_REAL(cuGetProcAddress_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = interposed(*pfn);
  return r;
}
