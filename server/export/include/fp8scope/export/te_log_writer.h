// fp8scoped --te-log-dir: every analyzed sample's records as the statistics log lines Transformer
// Engine's debug API writes (te_log/nvdlfw_log.h), one tree a job, one file a rank. The lines are
// written on a thread of their own behind a bounded queue, so a slow or full disk never holds up
// analysis: what cannot be written is dropped and counted by reason, never half a line, and the
// writer tries again once a second after a failure.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/history/records.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/te/nvdlfw_log.h"
#include "fp8scope/te/nvdlfw_log_files.h"

namespace fp8scope::server {

// Why lines were not written, in fp8scope_te_log_lines_dropped_total's reason label.
enum class TeLogDrop { kQueueFull, kSizeLimit, kTooManyFiles, kWriteFailed };
inline constexpr const char* kTeLogDropReasons[] = {"queue_full", "size_limit", "too_many_files", "write_failed"};
static_assert(std::size(kTeLogDropReasons) == static_cast<std::size_t>(TeLogDrop::kWriteFailed) + 1,
              "a reason label for every TeLogDrop, in its order");

struct TeLogCounts {
  std::uint64_t lines = 0;  // written
  std::array<std::uint64_t, std::size(kTeLogDropReasons)> dropped{};  // by TeLogDrop
  std::uint64_t bytes = 0;  // in the files now
};

struct TeLogLimits {
  std::uint64_t max_bytes = 1ull << 30;   // all files together
  std::size_t max_files = 4096;           // job and rank pairs
  std::uint64_t queue_bytes = 16ull << 20;  // lines waiting for the disk
  std::chrono::milliseconds retry_after{1000};  // after a failed write, that file's blocks are dropped this long
  bool rank_dirs = false;  // each rank's tree in <job>/rank_<rank>/ (NvdlfwLogFilesOptions::rank_dirs)
};

class TeLogWriter {
 public:
  static Result<std::unique_ptr<TeLogWriter>> open(const std::string& dir, TeLogLimits limits);
  ~TeLogWriter();  // writes what is queued, then stops
  TeLogWriter(const TeLogWriter&) = delete;
  TeLogWriter& operator=(const TeLogWriter&) = delete;

  // One sample's records (all of one job and rank): the lines the job's TE config logs
  // (`policy`'s te_logged), or every statistic when it names none. A name is written once a rank
  // and step, as `history --format nvdlfw` writes it, for the newest kStepsRemembered steps of
  // each rank.
  void add(const std::vector<history::HistoryRecord>& records, const SamplingPolicy& policy = {});

  TeLogCounts counts() const;

  static constexpr std::uint64_t kStepsRemembered = 16;
  static constexpr std::size_t kJobsRemembered = 1024;  // past it, every job's log starts afresh

 private:
  struct Block {
    std::string job;
    std::uint32_t rank = 0;
    std::string text;
    std::uint64_t lines = 0;
  };
  // A job's log: its config's filter, compiled once a policy version, and the names written.
  struct JobLog {
    std::uint64_t policy_version = 0;
    te::NvdlfwLog log;
  };
  // The lines of one sample's records, from its job's log.
  Block lines_of(const std::vector<history::HistoryRecord>& records, const SamplingPolicy& policy);
  TeLogWriter(std::unique_ptr<te::NvdlfwLogFiles> files, TeLogLimits limits);
  void run();
  void write(const Block& b);
  void drop(TeLogDrop why, std::uint64_t lines);  // with mu_ held

  std::unique_ptr<te::NvdlfwLogFiles> files_;  // the writer thread's alone
  const TeLogLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Block> queue_;
  std::uint64_t queued_bytes_ = 0;
  bool stopping_ = false;
  TeLogCounts counts_;
  // The writer thread's: per job and rank whose last write failed, when it may be tried again (a
  // file that cannot be written holds back no other; at most max_files kept), and what was last
  // said in the log.
  std::map<std::pair<std::string, std::uint32_t>, std::chrono::steady_clock::time_point> retry_at_;
  bool said_size_limit_ = false, said_too_many_files_ = false;
  std::mutex logs_mu_;  // the analysis threads': taken before mu_, never while holding it
  std::map<std::string, JobLog> logs_;
  std::thread thread_;
};

}  // namespace fp8scope::server
