// The shared memory clients on this host registered (shared_region_protocol.h): a unix
// SOCK_SEQPACKET socket, one thread that accepts registrations and notices when a client goes,
// and the table chunks look regions up in. A registered file must be a sealed memfd (tmpfs, its
// size sealed against shrinking); everything else is refused with the reason. The daemon reads a
// region with pread on a file description of its own, never mapping it: the client's pages never
// count in the daemon's resident memory, and no page table is filled and torn down per sample.
// Regions are counted and bounded per user and in all; a connection that does not register
// within seconds is closed.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fp8scope/wire/shared_region_protocol.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::server {

struct SharedRegionLimits {
  std::size_t max_regions = 1024;
  std::size_t max_regions_per_user = 64;
  std::uint64_t max_region_bytes = 64ull << 30;  // address space, not memory: pages are the client's
};

using RegionId = std::array<std::uint8_t, shared_region::kIdBytes>;

class SharedRegions {
 public:
  // Listens on `path` (replacing a stale socket file there), under a random instance id that
  // every reply repeats.
  static Result<std::unique_ptr<SharedRegions>> open(const std::string& path, SharedRegionLimits limits = {});
  ~SharedRegions();
  SharedRegions(const SharedRegions&) = delete;
  SharedRegions& operator=(const SharedRegions&) = delete;

  // A range of a region, readable while this value lives (the client may leave meanwhile).
  struct View {
    std::shared_ptr<const int> file;  // the region's file description, open while any view is
    std::uint64_t offset = 0, bytes = 0;
    // Copies the range into `into` (`bytes` of room).
    Status read(std::uint8_t* into) const;
  };
  // The bytes [offset, offset + bytes) of region `id`; an error naming what is wrong otherwise
  // (outside the region, or never written: a hole).
  Result<View> view(const std::string& id, std::uint64_t offset, std::uint64_t bytes) const;

  const std::string& path() const { return path_; }
  // The instance id as the Welcome carries it (its 16 bytes).
  std::string instance_id() const;
  std::size_t regions() const;

 private:
  struct Region {
    std::shared_ptr<const int> file;  // the memfd, on a file description of the daemon's own
    std::uint64_t bytes = 0;
  };
  struct Connection;

  SharedRegions(std::string path, int listener, int wake, SharedRegionLimits limits);
  void serve();
  void on_message(Connection& c);
  // Out of descriptors: takes the connection accept4 could not with the reserved descriptor and
  // closes it, so the listener stops being readable (no spin) and one client is refused, not all.
  void refuse_one();
  // The region for a registration message's descriptor, or why not.
  Result<Region> open_region(int fd) const;
  void reply(int fd, const RegionId* id, const std::string& message) const;

  std::string path_;
  int listener_, wake_;
  int spare_ = -1;  // held in reserve for refuse_one(); the serving thread's
  std::uint64_t refused_ = 0;
  std::chrono::steady_clock::time_point last_refusal_log_{};
  RegionId instance_;
  SharedRegionLimits limits_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, Region> regions_;  // by id (its 16 bytes)
  std::map<uid_t, std::size_t> per_user_;
};

}  // namespace fp8scope::server
