// What a storage engine implements for the history: the reads, one transaction per batch of
// writes, and the journal bookkeeping of which accepted samples are stored. HistoryStore queues
// and retries; a backend only talks to its database.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fp8scope/history/history_reader.h"

namespace fp8scope::history {

struct WriteBatch {
  std::vector<HistoryRecord> records;
  std::vector<ScalarRecord> scalars;
  std::vector<GemmOutputRecord> gemm_outputs;
  std::vector<SampleTicket> stored_samples;
  bool empty() const { return records.empty() && scalars.empty() && gemm_outputs.empty() && stored_samples.empty(); }
};

class Backend : public HistoryReader {
 public:
  // All of the batch in one transaction, or none of it (then an error; the caller retries). The
  // stored_samples of the previous successful batch are deleted in the same transaction: the
  // journal has released them by then.
  virtual Status write(const WriteBatch& batch) = 0;
  // Of the accepted samples of this writer, those with no stored_samples row.
  virtual Result<std::vector<SampleTicket>> unstored(const std::vector<SampleTicket>& accepted) const = 0;
  virtual Status forget_stored_samples() = 0;
  // Rows older than `time` (seconds since the epoch) go: records, GEMM checks and scalars.
  virtual Result<std::uint64_t> delete_before(double time) = 0;
  // Records this store counts as its own at open: a local file's all, a shared database's none.
  virtual std::uint64_t records_at_open() const = 0;
};

}  // namespace fp8scope::history
