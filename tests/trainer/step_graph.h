// tiny_trainer --cuda-graph: the training step captured into a CUDA graph once and replayed at every
// step after, as Megatron-Core's and PyTorch's CUDA graphs replay theirs: between replays the host
// only sets the step (fp8scope_step) and launches. The host work between a step's GEMMs (casts,
// activations, the loss, the weight update) becomes host nodes of the graph. A real driver forbids
// CUDA calls inside host nodes, and the trainer's make them (its tensors live on the host), so
// --cuda-graph runs on the CPU fixtures; scripts/gpu-check.sh has a GPU's own graphed GEMM loop.
//
// Through the driver API (cuStreamBeginCapture ... cuGraphLaunch, by the PLT), through entry points
// cuGetProcAddress returns (as libraries that resolve the driver at run time do), or through the
// runtime API (cudaStreamBeginCapture ... cudaGraphLaunch, PyTorch's path).
#pragma once

#include <cuda.h>

#include <deque>
#include <functional>
#include <string>

namespace fp8scope::trainer {

enum class GraphApi { kDriver, kProcAddress, kRuntime };

class StepGraph {
 public:
  StepGraph(GraphApi api, CUstreamCaptureMode mode, CUstream stream);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Host work of the step: run now, or while capturing, recorded as a host node.
  void host(std::function<void()> work);
  bool capturing() const { return capturing_; }
  bool ready() const { return exec_ != nullptr; }

  // How a new capture replaces the graph running so far: instantiated anew (the old exec and
  // graph destroyed at once, a replay of theirs possibly still being sampled), or the running exec
  // updated in place (cuGraphExecUpdate).
  enum class Replace { kInstantiate, kUpdate };
  // Captures `step` (its GEMMs and host work) into a graph and makes it the one launch() replays.
  void capture(const std::function<void()>& step, Replace replace = Replace::kInstantiate);
  void launch();
  // A second exec of the running graph, never launched (two instantiations of one graph), or none
  // again.
  void twin(bool on);

 private:
  struct Calls {
    CUresult (*begin)(CUstream, CUstreamCaptureMode);
    CUresult (*end)(CUstream, CUgraph*);
    CUresult (*instantiate)(CUgraphExec*, CUgraph, unsigned long long);
    CUresult (*update)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*);
    CUresult (*launch)(CUgraphExec, CUstream);
    CUresult (*destroy_exec)(CUgraphExec);
    CUresult (*destroy)(CUgraph);
  };
  static Calls calls_for(GraphApi api);

  Calls calls_;
  CUstreamCaptureMode mode_;
  CUstream stream_;
  bool capturing_ = false;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr, twin_ = nullptr;
  std::deque<std::function<void()>> host_work_;  // as long as any graph may run it: the trainer's life
};

}  // namespace fp8scope::trainer
