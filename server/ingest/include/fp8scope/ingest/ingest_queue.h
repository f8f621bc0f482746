// Complete samples waiting for analysis, one FIFO per analysis worker. A tensor's samples always
// land in the same FIFO (chosen by the tensor's key), so each tensor is analyzed in the order it
// was sent and its delayed-scaling history advances step by step. Memory is bounded by the
// ByteBudget the samples hold (reserved before they were accepted): push never blocks or fails.
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

  void push(Sample sample);
  // The next sample of this worker's FIFO; nullopt once the queue is closed and the FIFO drained.
  std::optional<Sample> pop(int shard);
  // No more pushes are coming: pop() returns what is left, then nullopt.
  void close();
  std::size_t size() const;
  int shards() const { return static_cast<int>(shards_.size()); }

 private:
  struct Shard {
    std::mutex mu;
    std::condition_variable ready;
    std::deque<Sample> samples;
    bool closed = false;
  };
  std::vector<std::unique_ptr<Shard>> shards_;
};

// The FIFO a sample belongs to: a hash of (job, run, rank, layer, gemm, operand).
std::size_t tensor_key_hash(const Sample& sample);

}  // namespace fp8scope::server
