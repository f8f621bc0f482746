#include "fp8scope/hook/cast_stash.h"

#include <cstdio>

#include "fp8scope/hook/device_staging.h"

namespace fp8scope::hook {

CastStash::~CastStash() {
  for (const StashedCast& c : casts_) {
    if (c.written != nullptr) cu_.event_destroy(c.written);
  }
  for (const std::vector<CUevent>* events : {&freed_writes_, &free_events_}) {
    for (CUevent e : *events) cu_.event_destroy(e);
  }
  if (buffer_ != 0) cu_.mem_free(buffer_);
  if (zeros_ != 0) cu_.mem_free(zeros_);
}

bool CastStash::set_up(CUstream stream) {
  state_ = State::kFailed;
  CUcontext context = nullptr;
  if (!cu_.complete() || cu_.memset_d8_async == nullptr) return false;
  if (cu_.ctx_get_current(&context) != CUDA_SUCCESS || context == nullptr) {
    state_ = State::kUnset;  // try again from a thread that has a context
    return false;
  }
  RelaxedCaptureMode relaxed(cu_);
  // Once, at set-up (like the allocation itself): the zeros that stand in for absent scalars,
  // written before any stream may read them. Not a synchronous copy: that would use the legacy
  // stream, which a capture on another blocking stream forbids.
  CUevent written = nullptr;
  const bool ok = cu_.mem_alloc(&buffer_, bytes_) == CUDA_SUCCESS && cu_.mem_alloc(&zeros_, kAlign) == CUDA_SUCCESS &&
                  cu_.memset_d8_async(zeros_, 0, kAlign, stream) == CUDA_SUCCESS &&
                  cu_.event_create(&written, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                  cu_.event_record(written, stream) == CUDA_SUCCESS && cu_.event_synchronize(written) == CUDA_SUCCESS;
  if (written != nullptr) cu_.event_destroy(written);
  if (!ok) {
    std::fprintf(stderr, "fp8scope hook: cannot set up the cast stash (%llu bytes); casts are not captured\n",
                 static_cast<unsigned long long>(bytes_));
    return false;
  }
  state_ = State::kReady;
  return true;
}

std::optional<CUdeviceptr> CastStash::reserve(std::uint64_t bytes, CUstream stream, std::uint64_t& begin,
                                              std::uint64_t& end) {
  if (state_ == State::kUnset && !set_up(stream)) return std::nullopt;
  if (state_ != State::kReady) return std::nullopt;
  bytes = align_up(bytes, kAlign);
  if (bytes == 0 || bytes > bytes_) return std::nullopt;
  for (;;) {
    std::uint64_t pos = head_;
    if (pos % bytes_ + bytes > bytes_) pos += bytes_ - pos % bytes_;  // no wrap inside
    if (pos + bytes - tail_ <= bytes_) {
      // A device-side wait: the host never waits here.
      for (CUevent e : freed_writes_) {
        if (cu_.stream_wait_event(stream, e, 0) != CUDA_SUCCESS) return std::nullopt;
      }
      free_events_.insert(free_events_.end(), freed_writes_.begin(), freed_writes_.end());
      freed_writes_.clear();
      previous_head_ = head_;
      begin = pos;
      head_ = pos + bytes;
      end = head_;
      return buffer_ + pos % bytes_;
    }
    // The oldest cast makes room, unless a record is still copying it out.
    if (casts_.empty() || casts_.front().readers > 0) return std::nullopt;
    free_front();
  }
}

void CastStash::free_front() {
  if (casts_.front().written != nullptr) freed_writes_.push_back(casts_.front().written);
  casts_.pop_front();
  tail_ = casts_.empty() ? head_ : casts_.front().begin;
}

bool CastStash::add(StashedCast cast, CUstream stream) {
  if (free_events_.empty()) {
    CUevent e = nullptr;
    if (cu_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
    free_events_.push_back(e);
  }
  if (cu_.event_record(free_events_.back(), stream) != CUDA_SUCCESS) return false;
  cast.written = free_events_.back();
  free_events_.pop_back();
  for (StashedCast& c : casts_) {
    const bool same_output = (cast.rowwise != nullptr && (c.rowwise == cast.rowwise || c.columnwise == cast.rowwise)) ||
                             (cast.columnwise != nullptr && (c.rowwise == cast.columnwise || c.columnwise == cast.columnwise));
    if (same_output) c.dead = true;  // the codes it wrote are overwritten
  }
  cast.id = next_id_++;
  casts_.push_back(cast);
  collect();
  return true;
}

const StashedCast* CastStash::find(const void* data, bool& columnwise) const {
  if (data == nullptr) return nullptr;
  for (auto c = casts_.rbegin(); c != casts_.rend(); ++c) {
    if (c->dead) continue;
    if (c->rowwise == data || c->columnwise == data) {
      columnwise = c->rowwise != data;
      return &*c;
    }
  }
  return nullptr;
}

void CastStash::hold(std::uint64_t id) {
  for (StashedCast& c : casts_) {
    if (c.id == id) ++c.readers;
  }
}

void CastStash::release(std::uint64_t id) {
  for (StashedCast& c : casts_) {
    if (c.id == id && c.readers > 0) --c.readers;
  }
  collect();
}

void CastStash::step(std::uint64_t step) {
  for (StashedCast& c : casts_) {
    if (c.step + 2 <= step) c.dead = true;
  }
  collect();
}

void CastStash::collect() {
  while (!casts_.empty() && casts_.front().dead && casts_.front().readers == 0) free_front();
}

}  // namespace fp8scope::hook
