// fp8scope-shipper: the process the hook spawns next to a training process. It drains the shared
// ring (client/shm), streams what it finds to fp8scoped with the daemon's protocol, writes the
// daemon's policy back into the segment, and reports the drop counters. It reconnects with backoff;
// while the daemon is away, samples are dropped and counted, never queued without bound. When the
// training process is gone it sends what is left, reports, and exits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/shm/shm_ring.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::shipper {

struct ShipperConfig {
  ConnectionOptions connection;
  v1::Hello hello;
  pid_t parent = 0;
  std::vector<int> cpus;  // the cores the shipper runs on; empty: those of the training process
  int ring_fd = -1;       // the ring's memfd, offered to a daemon on this host when the hook sealed it
  std::size_t ring_bytes = 0;
};

// From the environment the hook passed on: FP8SCOPE_ENDPOINT, FP8SCOPE_TOKEN_FILE, FP8SCOPE_TLS_CA /
// _CERT / _KEY, FP8SCOPE_JOB, FP8SCOPE_RUN, FP8SCOPE_RANK (else RANK, OMPI_COMM_WORLD_RANK,
// SLURM_PROCID), FP8SCOPE_WORLD_SIZE (else WORLD_SIZE, ...), FP8SCOPE_PARENT_PID,
// FP8SCOPE_SHIPPER_CPUS.
Result<ShipperConfig> config_from_environment();

// A ring record as the wire's TensorHeader; an error for a record the daemon would refuse anyway.
Result<v1::TensorHeader> tensor_header(const shm::RecordHeader& record);

class Shipper {
 public:
  Shipper(ShipperConfig config, shm::Header* segment);

  // Runs until the parent has exited and the ring is drained; returns the exit code.
  int run();

 private:
  void connect();
  void disconnect(const std::string& why);
  void share_ring();
  // Sends a record; true when it went by reference and stays held until the daemon's ack.
  bool handle(const shm::RecordHeader& record);
  void collect_acks();
  void release_held();
  void report_counters();
  void print_summary() const;

  ShipperConfig config_;
  shm::Header* segment_;
  shm::RingReader reader_;
  std::unique_ptr<SampleStream> stream_;
  std::map<std::uint64_t, const shm::RecordHeader*> held_;  // by sample id: read by the daemon, not yet acked
  bool share_refusal_reported_ = false;
  std::chrono::steady_clock::time_point next_connect_{};
  std::chrono::milliseconds backoff_{250};
  bool outage_reported_ = false;
  // What the daemon has counted of each drop reason on earlier streams: a new stream reports only
  // the rest (the daemon sums the increase per stream).
  std::uint64_t reported_[kClientDropCount] = {};
  std::uint64_t reported_this_stream_[kClientDropCount] = {};
  std::deque<v1::ScalarEvent> scalars_waiting_;  // scalars logged while the daemon was away
  std::uint64_t scalars_lost_ = 0;
};

}  // namespace fp8scope::shipper
