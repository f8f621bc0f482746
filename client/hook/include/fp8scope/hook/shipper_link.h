// The hook's side of the shipper: the shared segment (a memfd, mapped here and inherited by the
// shipper as fd 3) and the shipper process, spawned with posix_spawn and respawned with backoff
// when it dies. The shipper outlives the training process long enough to drain the ring: it
// watches its parent and leaves when the parent is gone and the ring is empty.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "fp8scope/shm/shm_ring.h"

namespace fp8scope::hook {

class ShipperLink {
 public:
  // Creates and maps the segment (ring of `ring_bytes`) and starts the shipper. An error leaves the
  // link without a segment: segment() is null and the hook samples nothing.
  ShipperLink(std::uint64_t ring_bytes, std::string shipper_path);

  shm::Header* segment() const { return segment_; }
  std::size_t segment_bytes() const { return bytes_; }

  // Reaps a dead shipper and starts another once its backoff has passed: 1 s after a death,
  // doubling to 30 s while shippers keep dying young (back to 1 s after one lived a minute).
  // Called from the hook's publisher thread, every ~100 ms.
  void keep_alive();


 private:
  void spawn();
  void shipper_gone();  // schedules the next spawn

  shm::Header* segment_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;
  std::string shipper_path_;
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point spawned_at_{}, next_spawn_{};
  std::chrono::seconds backoff_{1};
};

// Where the shipper binary is: FP8SCOPE_SHIPPER, else fp8scope-shipper in ../../bin from the
// hook's own file (the installed layout), else the build tree's.
std::string find_shipper();

}  // namespace fp8scope::hook
