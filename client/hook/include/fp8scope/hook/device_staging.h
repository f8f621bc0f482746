// The hook's device side: the context it samples in, a side stream for the copies out, and the
// staging ring, one device buffer that sampled operands are copied into on the caller's stream
// (stream order keeps an operand valid until its copy ran). Set up on the first sample, from the
// training thread that has a context; the ring is a hard limit: what does not fit is dropped.
// Not synchronized: Capture calls it under its lock, the publisher thread only its own methods.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "fp8scope/hook/real_api.h"
#include "fp8scope/shm/shm_ring.h"

namespace fp8scope::hook {

class DeviceStaging {
 public:
  // `pinned`: the shared segment, registered with the driver so the side stream's copies into it
  // run asynchronously.
  DeviceStaging(const DriverApi& cu, std::uint64_t bytes, void* pinned, std::uint64_t pinned_bytes);

  // Why the calling thread cannot stage now (no device, not the hook's context), or nothing.
  std::optional<shm::DropReason> problem();
  bool usable() const { return state_ == State::kReady; }
  // After a failed driver call: sampling stops for good.
  void give_up() { state_ = State::kFailed; }

  // A range of `bytes` (rounded up to kAlign) that does not wrap, or nothing when it would overrun
  // what the publisher has not released yet. Reservations are released in order (release()).
  struct Range {
    CUdeviceptr at;
    std::uint64_t end;  // release up to here once its copies are out
  };
  std::optional<Range> reserve(std::uint64_t bytes);
  std::uint64_t head() const { return head_; }
  void rewind(std::uint64_t head) { head_ = head; }  // undoes the reservations made after `head`
  void release(std::uint64_t end) { tail_ = end; }
  std::uint64_t bytes() const { return bytes_; }

  // An event recorded on `stream` after the copies enqueued there (pooled), or null on failure.
  CUevent mark(CUstream stream);
  void recycle(CUevent e) { free_events_.push_back(e); }

  // The publisher thread's, once usable() was seen true: the hook's context made current there, and
  // the side stream.
  bool enter_context();
  CUstream side() const { return side_; }
  bool side_synchronized();  // waits for what was queued on the side stream

  static constexpr std::uint64_t kAlign = 256;

 private:
  bool set_up();

  const DriverApi& cu_;
  const std::uint64_t bytes_;
  void* pinned_;
  std::uint64_t pinned_bytes_;
  enum class State { kUnset, kReady, kFailed } state_ = State::kUnset;
  CUcontext context_ = nullptr;
  CUstream side_ = nullptr;
  CUevent side_done_ = nullptr;
  CUdeviceptr buffer_ = 0;
  std::uint64_t head_ = 0, tail_ = 0;
  std::vector<CUevent> free_events_;
};

inline std::uint64_t align_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace fp8scope::hook
