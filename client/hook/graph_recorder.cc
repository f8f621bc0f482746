#include "fp8scope/hook/graph_recorder.h"

#include <algorithm>

namespace fp8scope::hook {

bool GraphRecorder::ensure_table(CUstream side) {
  std::lock_guard<std::mutex> lock(mu_);
  if (table_ != 0) return true;
  if (table_failed_ || cu_.memset_d8_async == nullptr) return false;
  RelaxedCaptureMode relaxed(cu_);
  const std::size_t bytes = sizeof(PlanSlot) * kPlanSlots;
  CUevent done = nullptr;
  const bool ok = cu_.mem_alloc(&table_, bytes) == CUDA_SUCCESS &&
                  cu_.memset_d8_async(table_, 0, bytes, side) == CUDA_SUCCESS &&
                  cu_.event_create(&done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                  cu_.event_record(done, side) == CUDA_SUCCESS && cu_.event_synchronize(done) == CUDA_SUCCESS;
  if (done != nullptr) cu_.event_destroy(done);
  if (!ok) {
    if (table_ != 0) cu_.mem_free(table_);
    table_ = 0;
    table_failed_ = true;
  }
  return ok;
}

std::shared_ptr<Recording> GraphRecorder::recording(std::uint64_t id, CUgraph graph) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Recording>& r = capturing_[id];
  if (r == nullptr) {
    r = std::make_shared<Recording>();
    r->capture_id = id;
    // The graph being captured into is the one the capture ends with (or the caller's, captured
    // to): bound now, usable once the capture ended well.
    if (graph != nullptr) {
      graphs_[graph] = r;
      r->graphs = 1;
    }
    recordings_.fetch_add(1, std::memory_order_relaxed);
  }
  return r;
}

std::optional<std::uint32_t> GraphRecorder::allocate_slot(Recording& r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_slots_.empty()) reclaim();
  std::uint32_t slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else if (next_slot_ < kPlanSlots) {
    slot = next_slot_++;
  } else {
    return std::nullopt;
  }
  r.slots.push_back(slot);
  return slot;
}

void GraphRecorder::capture_ended(std::uint64_t id, CUgraph graph) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = capturing_.find(id);
  if (it == capturing_.end()) return;
  const std::shared_ptr<Recording> r = it->second;
  capturing_.erase(it);
  // Bound to the graph it was captured into; a failed capture's graph is gone.
  for (auto g = graphs_.begin(); g != graphs_.end();) g = g->second == r ? graphs_.erase(g) : std::next(g);
  r->graphs = 0;
  if (graph != nullptr) {
    graphs_[graph] = r;
    r->graphs = 1;
    r->ended = true;
  }
  release_if_unused(r);
}

void GraphRecorder::instantiated(CUgraph graph, CUgraphExec exec) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = graphs_.find(graph);
  if (it == graphs_.end() || !it->second->ended) return;
  ExecState& e = execs_[exec];
  e = ExecState{};
  e.recording = it->second;
  ++it->second->execs;
}

void GraphRecorder::updated(CUgraphExec exec, CUgraph graph) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto g = graphs_.find(graph);
  const std::shared_ptr<Recording> next = g != graphs_.end() && g->second->ended ? g->second : nullptr;
  const auto e = execs_.find(exec);
  const std::shared_ptr<Recording> before = e != execs_.end() ? e->second.recording : nullptr;
  if (before == next) return;
  // The exec's nodes are now `graph`'s: the copies it records, reading `next`'s slots.
  if (before != nullptr) {
    --before->execs;
    if (e->second.launched) retire_after(*before, e->second.last_stream);
    release_if_unused(before);
  }
  if (next == nullptr) {
    if (e != execs_.end()) e->second.recording = nullptr;
    return;
  }
  ExecState& state = execs_[exec];
  state.recording = next;
  ++next->execs;
}

void GraphRecorder::exec_destroyed(CUgraphExec exec) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  ExecState e = std::move(it->second);
  execs_.erase(it);
  if (e.cleared != nullptr) free_events_.push_back(e.cleared);
  if (e.recording == nullptr) return;
  --e.recording->execs;
  if (e.launched) retire_after(*e.recording, e.last_stream);
  release_if_unused(e.recording);
}

void GraphRecorder::graph_destroyed(CUgraph graph) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = graphs_.find(graph);
  if (it == graphs_.end()) return;
  const std::shared_ptr<Recording> r = it->second;
  graphs_.erase(it);
  --r->graphs;
  release_if_unused(r);
}

void GraphRecorder::cloned(CUgraph original, CUgraph clone) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = graphs_.find(original);
  if (it == graphs_.end()) return;
  graphs_[clone] = it->second;
  ++it->second->graphs;
}

void GraphRecorder::nested(CUgraph child) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = graphs_.find(child); it != graphs_.end()) it->second->nested = true;
}

std::shared_ptr<const Recording> GraphRecorder::recording_of(CUgraphExec exec, bool& shared) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = execs_.find(exec);
  if (it == execs_.end() || it->second.recording == nullptr) return nullptr;
  const Recording& r = *it->second.recording;
  shared = r.execs > 1 || r.nested;
  return it->second.recording;
}

bool GraphRecorder::before_replay(CUgraphExec exec, CUstream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = execs_.find(exec);
  if (it == execs_.end() || !it->second.clear_pending) return true;
  ExecState& e = it->second;
  // The same stream orders this replay behind the clearing already.
  if (e.cleared_on != stream && cu_.stream_wait_event(stream, e.cleared, 0) != CUDA_SUCCESS) return false;
  e.clear_pending = false;
  return true;
}

void GraphRecorder::after_replay(CUgraphExec exec, CUstream stream, CUevent cleared) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = execs_.find(exec);
  if (it == execs_.end()) {
    if (cleared != nullptr) free_events_.push_back(cleared);
    return;
  }
  ExecState& e = it->second;
  e.last_stream = stream;
  e.launched = true;
  if (cleared == nullptr) return;
  if (e.cleared != nullptr) free_events_.push_back(e.cleared);
  e.cleared = cleared;
  e.cleared_on = stream;
  e.clear_pending = true;
}

CUevent GraphRecorder::event() {
  if (!free_events_.empty()) {
    CUevent e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  return cu_.event_create(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS ? e : nullptr;
}

CUevent GraphRecorder::take_event() {
  std::lock_guard<std::mutex> lock(mu_);
  return event();
}

void GraphRecorder::retire_after(Recording& r, CUstream stream) {
  // A replay still running reads the slots: they wait for the work queued on its stream. On a
  // stream now capturing, an event would become a node of that graph: the slots are never reused.
  CUevent done = cu_.capture_of(stream) ? nullptr : event();
  if (done != nullptr && cu_.event_record(done, stream) == CUDA_SUCCESS) {
    r.retire.push_back(done);
  } else {
    r.slots_lost = true;
  }
}

void GraphRecorder::release_if_unused(const std::shared_ptr<Recording>& r) {
  if (r->released || r->graphs > 0 || r->execs > 0 || capturing_.count(r->capture_id)) return;
  r->released = true;
  if (r->slots_lost) r->slots.clear();
  retired_.push_back(Retired{std::move(r->slots), std::move(r->retire)});
  r->slots.clear();
  r->retire.clear();
  recordings_.fetch_sub(1, std::memory_order_relaxed);
  reclaim();
}

void GraphRecorder::reclaim() {
  for (auto it = retired_.begin(); it != retired_.end();) {
    const bool finished = std::all_of(it->events.begin(), it->events.end(), [&](CUevent e) {
      return cu_.event_query(e) == CUDA_SUCCESS;
    });
    if (!finished) {
      ++it;
      continue;
    }
    free_slots_.insert(free_slots_.end(), it->slots.begin(), it->slots.end());
    free_events_.insert(free_events_.end(), it->events.begin(), it->events.end());
    it = retired_.erase(it);
  }
}

}  // namespace fp8scope::hook
