// Every computed record, kept in SQLite (WAL) in the daemon's data dir for reports, baselines and
// `fp8scope history`. Writes are queued and committed in batches by one writer thread, so the
// analysis never waits on the disk; the columns of the statistics come from the statistics table,
// and a store created by an older daemon gains the columns it lacks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "ack_journal.h"
#include "fp8scope/status.h"

struct sqlite3;

namespace fp8scope::server {

struct HistoryRecord {
  double time = 0;  // seconds since the Unix epoch
  std::string job, run;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  std::string layer, gemm, operand, dtype;
  std::int64_t numel = 0;
  std::string recipe, format;
  double scale = 0, scale_max = 0, scale_current = 0;
  std::vector<double> statistics;            // in statistics() order
  std::vector<std::uint64_t> histogram;      // log2|x*s| bins (kHistogramBins)
  std::string codes_digest;                  // hex code_digest() of the FP8 codes: the job's own
                                             // (observed) or a weight's under tensor_current; "" = none
  // The job's own codes ("observed"): how its scales were laid out (scale_layout.h's names, "" for
  // the what-ifs), the GEMM's alpha when read (0 = not), and its block scales' log2 histogram
  // (kScaleHistogramBins).
  std::string scale_layout;
  double gemm_alpha = 0;
  std::vector<std::uint64_t> scale_histogram;
};

struct ScalarRecord {
  double time = 0;
  std::string job, run;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  std::string name;
  double value = 0;
};

struct HistoryFilter {
  std::string job, run, layer_regex, gemm, operand, recipe;  // "" = any
  std::uint64_t min_step = 0, max_step = 0;                  // max 0 = no bound
  std::uint32_t limit = 100000;
};

class HistoryStore {
 public:
  static Result<std::unique_ptr<HistoryStore>> open(const std::string& data_dir);
  // Another process's store (a daemon may be writing it), for reading only: add() is not allowed.
  static Result<std::unique_ptr<HistoryStore>> open_read_only(const std::string& data_dir);
  ~HistoryStore();
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  // Writes that fail (a full disk, a locked file) are retried with backoff, the records kept in
  // memory up to kMaxPendingRecords; past that the oldest are dropped and counted as lost.
  static constexpr std::size_t kMaxPendingRecords = 200000;

  void add(HistoryRecord record);  // on a read-only store: ignored
  void add(ScalarRecord record);
  // After a sample's records: its journal ticket, written in the same transaction as the records
  // it follows (table stored_samples) and then given to the listener with stored = true; false when
  // the backlog overflowed and the sample's records were dropped unwritten.
  void add(JournalTicket stored_sample);
  void on_stored_sample(std::function<void(const JournalTicket&, bool stored)> listener);
  // At start, before any add(): which of a previous daemon's accepted samples have no records here
  // (those it acknowledged and lost), then forgetting the ids of the stored ones.
  Result<std::vector<AckJournal::Leftover>> unstored(const std::vector<AckJournal::Leftover>& accepted) const;
  Status forget_stored_samples();
  // Returns once everything added so far is committed or counted lost, or, while writes fail,
  // after one more attempt; an error then says how many records are still unwritten and why.
  Status flush();

  // The writer's state now: a failure that is over is not reported.
  struct WriteHealth {
    std::string error;             // empty while writes succeed
    std::uint64_t failed_writes = 0;  // batches that failed, in total
    std::uint64_t lost = 0;           // records dropped unwritten
    std::uint64_t pending = 0;        // records waiting to be written
  };
  WriteHealth write_health() const;

  // Records matching the filter, oldest first; `each` returns false to stop.
  Status query(const HistoryFilter& filter, const std::function<bool(const HistoryRecord&)>& each) const;
  // How many records match the filter (ignoring its limit): the total of a progress bar.
  Result<std::uint64_t> count(const HistoryFilter& filter) const;
  Status query_scalars(const std::string& run, const std::string& name,
                       const std::function<bool(const ScalarRecord&)>& each) const;

  std::uint64_t stored() const;
  const std::string& path() const { return path_; }

 private:
  HistoryStore(std::string path, sqlite3* write_db, sqlite3* read_db);
  void writer_loop();
  using Item = std::variant<HistoryRecord, ScalarRecord, JournalTicket>;
  Status write_batch(std::vector<Item>& batch);

  std::string path_;
  sqlite3* write_db_;
  sqlite3* read_db_;
  mutable std::mutex read_mu_;
  // Held across a batch's COMMIT and the count that follows it: stored() never reports fewer records
  // than a reader can already see.
  mutable std::mutex commit_mu_;
  mutable std::mutex mu_;
  std::condition_variable wake_, committed_;
  std::deque<Item> pending_;
  void enqueue(Item item);
  std::function<void(const JournalTicket&, bool)> sample_listener_;
  // The last committed batch's stored_samples rows (up to this rowid; 0 = none): released by then,
  // deleted in the next batch.
  std::int64_t stored_samples_done_ = 0;

  std::uint64_t enqueued_ = 0, written_ = 0, records_ = 0;  // written_: committed or lost
  std::size_t writing_ = 0;  // taken from pending_ by the write in progress: still waiting, too
  bool stopping_ = false;
  bool flush_requested_ = false;  // retry now, not after the backoff
  std::string last_error_;        // the current failure; cleared by a successful write
  std::uint64_t failed_writes_ = 0, lost_ = 0;
  std::thread writer_;
  std::vector<bool> has_added_;  // which columns added since the first schema this store has (kAddedColumns)
};

}  // namespace fp8scope::server
