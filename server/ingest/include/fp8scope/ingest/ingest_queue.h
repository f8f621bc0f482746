// Complete samples and scalar marks waiting for analysis, one FIFO per analysis worker. A tensor's
// samples always land in the same FIFO (chosen by the tensor's key), so each tensor is analyzed in
// the order it was sent and its delayed-scaling history advances step by step; a process's scalars
// keep their order too. Samples are bounded by the ByteBudget they hold (reserved before they were
// accepted), scalars by a count per FIFO: push never blocks.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "fp8scope/ingest/sample.h"

namespace fp8scope::server {

class IngestQueue {
 public:
  explicit IngestQueue(int shards);

  // Scalars a FIFO may hold: a client logging faster than the history keeps up has the rest dropped.
  static constexpr std::size_t kMaxScalarsPerShard = 65536;

  void push(Sample sample);
  // False (dropped) when the scalar's FIFO holds kMaxScalarsPerShard scalars already.
  bool push(ScalarMark scalar);
  // The next item of this worker's FIFO; nullopt once the queue is closed and the FIFO drained.
  std::optional<IngestItem> pop(int shard);
  // No more pushes are coming: pop() returns what is left, then nullopt.
  void close();
  std::size_t size() const;
  int shards() const { return static_cast<int>(shards_.size()); }

 private:
  struct Shard {
    std::mutex mu;
    std::condition_variable ready;
    std::deque<IngestItem> items;
    std::size_t scalars = 0;
    bool closed = false;
  };
  std::vector<std::unique_ptr<Shard>> shards_;
};

// The FIFO a sample belongs to: a hash of (job, run, rank, layer, gemm, operand).
std::size_t tensor_key_hash(const Sample& sample);
// A scalar's: a hash of its process (job, run, rank).
std::size_t process_key_hash(const ClientInfo& client);

}  // namespace fp8scope::server
