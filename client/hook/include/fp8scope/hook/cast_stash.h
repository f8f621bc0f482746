// Where a Transformer Engine cast's input waits for the GEMM that reads its output (DESIGN.md "The
// casts"): at the cast, its high-precision part (CastScalars, then the parts cast_layout() places)
// is copied device to device on the caller's stream into this ring, under the device pointers of
// the codes it wrote; a sampled GEMM operand at one of those pointers takes the part into its
// record (Capture::sample), so the record carries the GEMM's name, role and operand. A cast is kept
// while a GEMM may still read it: until a newer cast writes the same output, two steps pass, or
// the ring needs its room; one whose part a record is still copying out is never overwritten.
// Not synchronized: Capture calls it under its lock.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "fp8scope/hook/real_api.h"
#include "fp8scope/shm/shm_ring.h"

namespace fp8scope::hook {

struct StashedCast {
  std::uint64_t id = 0;
  const void* rowwise = nullptr;     // the codes' device pointers a GEMM may read
  const void* columnwise = nullptr;
  bool columnwise_transposed = false;  // the column-wise copy is the input's transpose
  shm::CastRecord record{};          // without kCastColumnwise / kCastTransposed: the GEMM says those
  CUdeviceptr at = 0;                // its part on the device
  std::uint64_t step = 0;            // the step it was made in
  // Ring positions (monotonic) and the records still copying its part out.
  std::uint64_t begin = 0, end = 0;
  CUevent written = nullptr;  // after the copies into it, on the cast's stream
  int readers = 0;
  bool dead = false;  // superseded or expired: no GEMM may pair with it; freed once unread
};

class CastStash {
 public:
  CastStash(const DriverApi& cu, std::uint64_t bytes) : cu_(cu), bytes_(bytes) {}
  // Frees the ring and its events (the hook's stash lives as long as the process; tests' do not).
  ~CastStash();
  CastStash(const CastStash&) = delete;
  CastStash& operator=(const CastStash&) = delete;

  // Room for a part of `bytes`, freeing the oldest casts no record is reading; nothing when there
  // is none (or no device buffer: the first call allocates it, on a thread with the context).
  // `stream`, the one the part will be copied on, first waits for the copies into the room freed
  // since the last reservation (their casts may have run on other streams).
  std::optional<CUdeviceptr> reserve(std::uint64_t bytes, CUstream stream, std::uint64_t& begin, std::uint64_t& end);
  // After reserve() and the copies: the cast is kept, `written` recorded on `stream`. Casts that
  // wrote the same outputs before it are dead.
  bool add(StashedCast cast, CUstream stream);
  // Undoes the last reserve() (its copies could not be enqueued).
  void unreserve() { head_ = previous_head_; }

  // The live cast whose output a GEMM operand at `data` reads, and whether it is the column-wise copy.
  const StashedCast* find(const void* data, bool& columnwise) const;
  // A record copying a cast's part out, and its end (the publisher's, once the copy ran).
  void hold(std::uint64_t id);
  void release(std::uint64_t id);
  // A new step: casts two steps old are dead (a GEMM of the next step may still read the last's).
  void step(std::uint64_t step);

  // Zeroed device bytes, for the scalars a cast did not have (allocated with the ring).
  CUdeviceptr zeros() const { return zeros_; }
  std::uint64_t bytes() const { return bytes_; }

  static constexpr std::uint64_t kAlign = 256;

 private:
  bool set_up(CUstream stream);
  void collect();  // frees dead, unread casts from the front
  void free_front();

  const DriverApi& cu_;
  const std::uint64_t bytes_;
  enum class State { kUnset, kReady, kFailed } state_ = State::kUnset;
  CUdeviceptr buffer_ = 0, zeros_ = 0;
  std::uint64_t head_ = 0, tail_ = 0, previous_head_ = 0, next_id_ = 1;
  std::deque<StashedCast> casts_;  // in ring order
  std::vector<CUevent> freed_writes_;  // of casts freed since the last reservation
  std::vector<CUevent> free_events_;
};

}  // namespace fp8scope::hook
