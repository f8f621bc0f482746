#include "fp8scope/hook/device_staging.h"

#include <cstdio>

namespace fp8scope::hook {

DeviceStaging::DeviceStaging(const DriverApi& cu, std::uint64_t bytes, void* pinned, std::uint64_t pinned_bytes)
    : cu_(cu), bytes_(align_up(bytes, kAlign)), pinned_(pinned), pinned_bytes_(pinned_bytes) {}

bool DeviceStaging::set_up() {
  state_ = State::kFailed;
  if (!cu_.complete()) return false;
  RelaxedCaptureMode relaxed(cu_);
  if (cu_.ctx_get_current(&context_) != CUDA_SUCCESS || context_ == nullptr) {
    state_ = State::kUnset;  // try again from a thread that has a context
    return false;
  }
  if (cu_.stream_create(&side_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      cu_.event_create(&side_done_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      cu_.mem_alloc(&buffer_, bytes_) != CUDA_SUCCESS) {
    std::fprintf(stderr, "fp8scope hook: cannot set up the device staging buffer (%llu bytes); sampling is off\n",
                 static_cast<unsigned long long>(bytes_));
    return false;
  }
  // Pinned, the side stream's copies run asynchronously; unpinned they still work (the publisher
  // thread waits for them, never the training thread).
  cu_.mem_host_register(pinned_, pinned_bytes_, 0);
  state_ = State::kReady;
  return true;
}

std::optional<shm::DropReason> DeviceStaging::problem() {
  if (state_ == State::kUnset && !set_up()) {
    return state_ == State::kUnset ? shm::DropReason::kNoContext : shm::DropReason::kCudaError;
  }
  if (state_ != State::kReady) return shm::DropReason::kCudaError;
  CUcontext current = nullptr;
  if (cu_.ctx_get_current(&current) != CUDA_SUCCESS || current != context_) return shm::DropReason::kNoContext;
  return std::nullopt;
}

std::optional<DeviceStaging::Range> DeviceStaging::reserve(std::uint64_t bytes) {
  bytes = align_up(bytes, kAlign);
  std::uint64_t pos = head_;
  if (pos % bytes_ + bytes > bytes_) pos += bytes_ - pos % bytes_;  // no wrap inside
  if (bytes > bytes_ || pos + bytes - tail_ > bytes_) return std::nullopt;
  head_ = pos + bytes;
  return Range{buffer_ + pos % bytes_, head_};
}

CUevent DeviceStaging::mark(CUstream stream) {
  if (free_events_.empty()) {
    CUevent e = nullptr;
    if (cu_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
    free_events_.push_back(e);
  }
  if (cu_.event_record(free_events_.back(), stream) != CUDA_SUCCESS) return nullptr;
  CUevent e = free_events_.back();
  free_events_.pop_back();
  return e;
}

bool DeviceStaging::enter_context() { return cu_.ctx_set_current(context_) == CUDA_SUCCESS; }

bool DeviceStaging::side_synchronized() {
  return cu_.event_record(side_done_, side_) == CUDA_SUCCESS && cu_.event_synchronize(side_done_) == CUDA_SUCCESS;
}

}  // namespace fp8scope::hook
