// The hook's publisher thread, the one that waits so the training threads never do: it takes the
// records they queued, in ring order, waits for each one's copies into the device staging ring,
// copies it into the shared ring from a side stream, and publishes it; between batches it keeps
// the shipper alive. Its queue shares the capture lock, under which records are reserved, so the
// queue's order is the ring's.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "fp8scope/hook/cast_stash.h"
#include "fp8scope/hook/device_staging.h"
#include "fp8scope/hook/expert_gather.h"
#include "fp8scope/hook/pending_record.h"
#include "fp8scope/hook/shipper_link.h"

namespace fp8scope::hook {

class Publisher {
 public:
  // `mu`: the capture lock, which also guards `staging`'s reservations and `stash`.
  Publisher(std::mutex& mu, const DriverApi& cu, ShipperLink& link, shm::RingWriter& writer, DeviceStaging& staging,
            ExpertGather& gather, CastStash& stash);

  // Starts the thread (detached and never destroyed: nothing at exit can race a destructor).
  void start();

  // Under mu, held in `lock`: queues p and releases the lock, then wakes the thread if it sleeps
  // (woken while the caller still held mu, it would only block on it again: two more syscalls and
  // a context switch on the training thread's time). A record with nothing to copy and nothing
  // ahead of it is published at once.
  void enqueue(std::unique_lock<std::mutex>& lock, const PendingRecord& p);
  // The same for records reserved one after another (a graph replay's), queued together.
  void enqueue(std::unique_lock<std::mutex>& lock, const std::vector<PendingRecord>& records);

  // At process exit: lets the thread finish what is queued, for at most `grace_ms`, then stops it.
  void drain(int grace_ms);

 private:
  void loop();
  void unlock_and_wake(std::unique_lock<std::mutex>& lock);
  // Copies a staged sample into its record (when `can_copy`) and publishes the record.
  void finish(PendingRecord& p, bool can_copy);

  std::mutex& mu_;
  const DriverApi& cu_;
  ShipperLink& link_;
  shm::RingWriter& writer_;
  DeviceStaging& staging_;
  ExpertGather& gather_;
  CastStash& stash_;

  // Under mu_:
  std::condition_variable work_;     // the thread waits here for records
  std::condition_variable drained_;  // drain() waits here for the queue to empty
  bool idle_ = false;                // wake the thread only when it sleeps: a wake costs a syscall
  std::deque<PendingRecord> pending_;
  // The working batch. A member, not a local of the thread: a forked child has no publisher
  // thread, and what only its stack held would look leaked there.
  std::deque<PendingRecord> batch_;
  std::size_t in_flight_ = 0;  // taken from pending_, not yet published
  bool stop_ = false;
};

}  // namespace fp8scope::hook
