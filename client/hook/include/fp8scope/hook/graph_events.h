// Where the interposed CUDA graph entry points (interpose_graphs.cc for the driver, interpose_cudart.cc
// for the runtime) report, after the real call succeeded, so the hook knows which graphs and
// instantiated graphs run what it recorded at capture (graph_recorder.h), and where a replay goes
// through the hook (HookRuntime::graph_launch). Plain types only: those files see cuda.h with
// the driver's unversioned names, the rest of the hook with cuda.h's versioned ones.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fp8scope::hook {

// The real launch, called by the hook once around it is ready.
struct GraphLaunch {
  CUresult (*call)(void* context);
  void* context;
  CUresult operator()() const { return call(context); }
};

namespace graph_events {

// Stream captures in flight anywhere in the process: while there are none, a GEMM need not ask
// the driver whether its stream captures.
void capture_begun();
bool any_capture();
// Before the real end: the id of the capture `stream` is in (0: none); after it, the graph it
// produced (null: it failed).
std::uint64_t capture_id(CUstream stream);
void capture_ended(std::uint64_t id, CUgraph graph);

void instantiated(CUgraph graph, CUgraphExec exec);
void updated(CUgraphExec exec, CUgraph graph);
void exec_destroyed(CUgraphExec exec);
void graph_destroyed(CUgraph graph);
void cloned(CUgraph original, CUgraph clone);
void nested(CUgraph child);  // embedded in another graph as a child graph node

// A replay of `exec` on `stream`; `real` runs it.
CUresult launch(CUgraphExec exec, CUstream stream, GraphLaunch real);

}  // namespace graph_events
}  // namespace fp8scope::hook
