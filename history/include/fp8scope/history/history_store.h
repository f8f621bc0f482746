// The daemon's side of the history: every computed record queued and committed in batches by one
// writer thread, so the analysis never waits on the database, into a SQLite file in the data dir or
// a PostgreSQL database a whole job's daemons share. Writes that fail (a full disk, a database
// that went away) are retried with backoff, the records kept in memory up to a bound and counted
// when dropped past it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "fp8scope/history/history_reader.h"
#include "fp8scope/history/records.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

class Backend;
struct WriteBatch;

struct HistoryStoreOptions {
  // This daemon among the writers of a shared database (its journal bookkeeping is kept under this
  // name): host and data dir.
  std::string writer;
  double retention_days = 0;  // rows older than this are deleted (hourly); 0 = kept
};

class HistoryStore {
 public:
  // `location`: see open_history_reader(); a data dir or SQLite file is created when missing.
  static Result<std::unique_ptr<HistoryStore>> open(const std::string& location, const HistoryStoreOptions& options);
  ~HistoryStore();
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  static constexpr std::size_t kMaxPendingRecords = 200000;

  void add(HistoryRecord record);
  void add(GemmOutputRecord record);
  void add(ScalarRecord record);
  // A sample's records and its ticket, queued at once and written in one transaction (the ticket
  // in table stored_samples), so that no start after a crash finds the records without the ticket;
  // then the ticket goes to the listener with stored = true; false when the backlog overflowed and
  // the sample's records were dropped unwritten.
  void add_sample(std::vector<HistoryRecord> records, std::optional<SampleTicket> stored_sample);
  void on_stored_sample(std::function<void(const SampleTicket&, bool stored)> listener);
  // At start, before any add(): which of a previous daemon's accepted samples have no records here
  // (those it acknowledged and lost), then forgetting the ids of the stored ones.
  Result<std::vector<SampleTicket>> unstored(const std::vector<SampleTicket>& accepted) const;
  Status forget_stored_samples();
  // Returns once everything added so far is committed or counted lost, or, while writes fail,
  // after one more attempt; an error then says how many records are still unwritten and why.
  Status flush();

  // The writer's state now: a failure that is over is not reported.
  struct WriteHealth {
    std::string error;                // empty while writes succeed
    std::uint64_t failed_writes = 0;  // batches that failed, in total
    std::uint64_t lost = 0;           // records dropped unwritten
    std::uint64_t pending = 0;        // records waiting to be written
    std::uint64_t expired = 0;        // records deleted by retention
  };
  WriteHealth write_health() const;

  const HistoryReader& reader() const;
  // Records stored: a SQLite file's all, plus those this daemon committed (a shared database's
  // other writers are not counted).
  std::uint64_t stored() const;
  std::string location() const;

 private:
  HistoryStore(std::unique_ptr<Backend> backend, HistoryStoreOptions options);
  using Item = std::variant<HistoryRecord, GemmOutputRecord, ScalarRecord, SampleTicket>;
  void enqueue(Item item);
  void enqueue(std::span<Item> items);  // moved from, contiguous, under one lock
  void writer_loop();
  std::optional<WriteBatch> take_batch(std::chrono::milliseconds backoff, std::size_t& taken);
  void keep_for_retry(WriteBatch& batch, std::size_t taken, const Status& s, std::chrono::milliseconds& backoff);
  void expire_old_rows();

  std::unique_ptr<Backend> backend_;
  const HistoryStoreOptions options_;
  // Held across a batch's commit and the count that follows it: stored() never reports fewer records
  // than a reader can already see.
  mutable std::mutex commit_mu_;
  mutable std::mutex mu_;
  std::condition_variable wake_, committed_;
  std::deque<Item> pending_;
  std::function<void(const SampleTicket&, bool)> sample_listener_;

  std::uint64_t enqueued_ = 0, written_ = 0, records_ = 0;  // written_: committed or lost
  std::size_t writing_ = 0;  // taken from pending_ by the write in progress: still waiting, too
  bool stopping_ = false;
  bool flush_requested_ = false;  // retry now, not after the backoff
  std::string last_error_;        // the current failure; cleared by a successful write
  std::uint64_t failed_writes_ = 0, lost_ = 0, expired_ = 0;
  double next_expiry_ = 0;  // when retention runs next (steady seconds)
  std::thread writer_;
};

// Opens a history for reading: "postgresql://..." (or "postgres://"), "sqlite:///path", a SQLite
// file, or a data directory (its history.sqlite). A SQLite file a daemon is writing is fine.
Result<std::unique_ptr<HistoryReader>> open_history_reader(const std::string& location);

}  // namespace fp8scope::history
