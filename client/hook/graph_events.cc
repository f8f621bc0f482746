#include "fp8scope/hook/graph_events.h"

#include <atomic>

#include "fp8scope/hook/hook_runtime.h"

namespace fp8scope::hook::graph_events {
namespace {

std::atomic<int> g_captures{0};

// The recorder of a running hook; graphs made before it existed hold nothing of it.
GraphRecorder* recorder() {
  HookRuntime* hook = HookRuntime::existing();
  return hook != nullptr ? &hook->graphs() : nullptr;
}

}  // namespace

void capture_begun() { g_captures.fetch_add(1, std::memory_order_relaxed); }

bool any_capture() { return g_captures.load(std::memory_order_relaxed) > 0; }

std::uint64_t capture_id(CUstream stream) {
  if (recorder() == nullptr) return 0;
  const std::optional<DriverApi::CaptureInfo> info = driver_api().capture_of(stream);
  return info ? info->id : 0;
}

void capture_ended(std::uint64_t id, CUgraph graph) {
  // A capture begun where the hook did not see it ends here too: the count stays at least 0.
  int n = g_captures.load(std::memory_order_relaxed);
  while (n > 0 && !g_captures.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
  if (GraphRecorder* r = recorder(); r != nullptr && id != 0) r->capture_ended(id, graph);
}

void instantiated(CUgraph graph, CUgraphExec exec) {
  if (GraphRecorder* r = recorder()) r->instantiated(graph, exec);
}

void updated(CUgraphExec exec, CUgraph graph) {
  if (GraphRecorder* r = recorder()) r->updated(exec, graph);
}

void exec_destroyed(CUgraphExec exec) {
  if (GraphRecorder* r = recorder()) r->exec_destroyed(exec);
}

void graph_destroyed(CUgraph graph) {
  if (GraphRecorder* r = recorder()) r->graph_destroyed(graph);
}

void cloned(CUgraph original, CUgraph clone) {
  if (GraphRecorder* r = recorder()) r->cloned(original, clone);
}

void nested(CUgraph child) {
  if (GraphRecorder* r = recorder()) r->nested(child);
}

CUresult launch(CUgraphExec exec, CUstream stream, GraphLaunch real) {
  HookRuntime* hook = HookRuntime::existing();
  return hook != nullptr ? hook->graph_launch(exec, stream, real) : real();
}

}  // namespace fp8scope::hook::graph_events
