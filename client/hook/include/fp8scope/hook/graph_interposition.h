// What every interposed CUDA graph entry point does, the driver's (interpose_graphs.cc) and the
// runtime's (interpose_cudart.cc) alike: guard, call the real function with the caller's
// arguments untouched, and when it succeeded and the call is the outermost, tell graph_events.h.
// The result is returned as is. Success is 0 in both APIs (CUDA_SUCCESS, cudaSuccess).
#pragma once

#include <dlfcn.h>

#include <cstdint>

#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/graph_events.h"

namespace fp8scope::hook::graph_interposition {

// The definition below the hook: the next object in lookup order, else the already loaded library.
inline void* next_definition(const char* symbol, const char* soname) {
  if (void* f = dlsym(RTLD_NEXT, symbol)) return f;
  void* h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  void* f = dlsym(h, symbol);
  dlclose(h);
  return f;
}

template <class R>
bool succeeded(R r) {
  return r == R{};
}

// Stream capture begins: counted, so GEMMs know to ask their stream.
template <class F, class... A>
auto begin_capture(F real, A... a) {
  CallGuard guard;
  const auto r = real(a...);
  if (succeeded(r) && guard.observe()) graph_events::capture_begun();
  return r;
}

// Stream capture ends, into *graph (or not at all).
template <class F, class Stream, class Graph>
auto end_capture(F real, Stream stream, Graph* graph) {
  CallGuard guard;
  const bool observe = guard.observe();
  const std::uint64_t id = observe ? graph_events::capture_id(stream) : 0;
  const auto r = real(stream, graph);
  if (observe) graph_events::capture_ended(id, succeeded(r) && graph != nullptr ? *graph : nullptr);
  return r;
}

template <class F, class Exec, class Graph, class... A>
auto instantiate(F real, Exec* exec, Graph graph, A... a) {
  CallGuard guard;
  const auto r = real(exec, graph, a...);
  if (succeeded(r) && exec != nullptr && guard.observe()) graph_events::instantiated(graph, *exec);
  return r;
}

template <class F, class Exec, class Graph, class... A>
auto update(F real, Exec exec, Graph graph, A... a) {
  CallGuard guard;
  const auto r = real(exec, graph, a...);
  if (succeeded(r) && guard.observe()) graph_events::updated(exec, graph);
  return r;
}

// Destruction is told first: once the handle is freed another thread may be given it again.
template <class F, class Exec>
auto destroy_exec(F real, Exec exec) {
  CallGuard guard;
  if (guard.observe()) graph_events::exec_destroyed(exec);
  return real(exec);
}

template <class F, class Graph>
auto destroy_graph(F real, Graph graph) {
  CallGuard guard;
  if (guard.observe()) graph_events::graph_destroyed(graph);
  return real(graph);
}

template <class F, class Graph>
auto clone(F real, Graph* copy, Graph original) {
  CallGuard guard;
  const auto r = real(copy, original);
  if (succeeded(r) && copy != nullptr && guard.observe()) graph_events::cloned(original, *copy);
  return r;
}

template <class F, class Node, class Graph, class Dependencies>
auto add_child_graph(F real, Node* node, Graph graph, Dependencies dependencies, std::size_t count, Graph child) {
  CallGuard guard;
  const auto r = real(node, graph, dependencies, count, child);
  if (succeeded(r) && guard.observe()) graph_events::nested(child);
  return r;
}

// A replay: through the hook, which calls the real launch once it has planned around it.
template <class F, class Exec, class Stream>
auto launch(F real, Exec exec, Stream stream) {
  CallGuard guard;
  if (!guard.observe()) return real(exec, stream);
  struct Call {
    F real;
    Exec exec;
    Stream stream;
    decltype(real(exec, stream)) result;
  } call{real, exec, stream, {}};
  const auto run = [](void* context) {
    Call& c = *static_cast<Call*>(context);
    c.result = c.real(c.exec, c.stream);
    return succeeded(c.result) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  };
  graph_events::launch(exec, stream, GraphLaunch{run, &call});
  return call.result;
}

}  // namespace fp8scope::hook::graph_interposition
