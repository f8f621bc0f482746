#include "step_graph.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "device_gemms.h"

namespace fp8scope::trainer {
namespace {

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(what, r);
}

// The runtime's calls in the driver's shapes (the runtime's handles are the driver's).
CUresult of(cudaError_t e) { return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN; }
CUresult runtime_begin(CUstream s, CUstreamCaptureMode m) {
  return of(cudaStreamBeginCapture(s, static_cast<cudaStreamCaptureMode>(m)));
}
CUresult runtime_end(CUstream s, CUgraph* g) { return of(cudaStreamEndCapture(s, g)); }
CUresult runtime_instantiate(CUgraphExec* e, CUgraph g, unsigned long long flags) {
  return of(cudaGraphInstantiate(e, g, flags));
}
CUresult runtime_update(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo*) {
  cudaGraphExecUpdateResultInfo info{};
  return of(cudaGraphExecUpdate(e, g, &info));
}
CUresult runtime_launch(CUgraphExec e, CUstream s) { return of(cudaGraphLaunch(e, s)); }
CUresult runtime_destroy_exec(CUgraphExec e) { return of(cudaGraphExecDestroy(e)); }
CUresult runtime_destroy(CUgraph g) { return of(cudaGraphDestroy(g)); }

template <class F>
void entry_point(F& f, const char* name) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult found{};
  check(cuGetProcAddress(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found), name);
  f = reinterpret_cast<F>(p);
}

}  // namespace

StepGraph::Calls StepGraph::calls_for(GraphApi api) {
  switch (api) {
    case GraphApi::kDriver:
      return {cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphExecUpdate,
              cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy};
    case GraphApi::kProcAddress: {
      Calls c{};
      entry_point(c.begin, "cuStreamBeginCapture");
      entry_point(c.end, "cuStreamEndCapture");
      entry_point(c.instantiate, "cuGraphInstantiate");
      entry_point(c.update, "cuGraphExecUpdate");
      entry_point(c.launch, "cuGraphLaunch");
      entry_point(c.destroy_exec, "cuGraphExecDestroy");
      entry_point(c.destroy, "cuGraphDestroy");
      return c;
    }
    case GraphApi::kRuntime:
      return {runtime_begin, runtime_end, runtime_instantiate, runtime_update, runtime_launch, runtime_destroy_exec,
              runtime_destroy};
  }
  return {};
}

StepGraph::StepGraph(GraphApi api, CUstreamCaptureMode mode, CUstream stream)
    : calls_(calls_for(api)), mode_(mode), stream_(stream) {}

StepGraph::~StepGraph() {
  twin(false);
  if (exec_ != nullptr) calls_.destroy_exec(exec_);
  if (graph_ != nullptr) calls_.destroy(graph_);
}

void StepGraph::host(std::function<void()> work) {
  if (!capturing_) return work();
  host_work_.push_back(std::move(work));
  const auto run = [](void* w) { (*static_cast<std::function<void()>*>(w))(); };
  check(cuLaunchHostFunc(stream_, run, &host_work_.back()), "cuLaunchHostFunc");
}

void StepGraph::capture(const std::function<void()>& step, Replace replace) {
  check(calls_.begin(stream_, mode_), "begin capture");
  capturing_ = true;
  step();
  capturing_ = false;
  CUgraph graph = nullptr;
  check(calls_.end(stream_, &graph), "end capture");
  if (exec_ != nullptr && replace == Replace::kUpdate) {
    CUgraphExecUpdateResultInfo info{};
    check(calls_.update(exec_, graph, &info), "graph exec update");
  } else {
    CUgraphExec exec = nullptr;
    check(calls_.instantiate(&exec, graph, 0), "graph instantiate");
    if (exec_ != nullptr) check(calls_.destroy_exec(exec_), "graph exec destroy");
    exec_ = exec;
  }
  if (graph_ != nullptr) check(calls_.destroy(graph_), "graph destroy");
  graph_ = graph;
  size_t nodes = 0;
  check(cuGraphGetNodes(graph_, nullptr, &nodes), "graph get nodes");
  std::printf("graph: %zu nodes\n", nodes);
}

void StepGraph::launch() { check(calls_.launch(exec_, stream_), "graph launch"); }

void StepGraph::twin(bool on) {
  if (on && twin_ == nullptr) check(calls_.instantiate(&twin_, graph_, 0), "graph instantiate (twin)");
  if (!on && twin_ != nullptr) {
    check(calls_.destroy_exec(twin_), "graph exec destroy (twin)");
    twin_ = nullptr;
  }
}

}  // namespace fp8scope::trainer
