#include "fp8scope/export/te_log_writer.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "fp8scope/te/nvdlfw_log.h"
#include "fp8scope/te/te_names.h"

namespace fp8scope::server {

Result<std::unique_ptr<TeLogWriter>> TeLogWriter::open(const std::string& dir, TeLogLimits limits) {
  te::NvdlfwLogFilesOptions options;
  options.per_job = true;  // one daemon hears many jobs, each with its own ranks
  options.rank_dirs = limits.rank_dirs;
  options.max_bytes = limits.max_bytes;
  options.max_files = limits.max_files;
  Result<std::unique_ptr<te::NvdlfwLogFiles>> files = te::NvdlfwLogFiles::open(dir, options);
  if (!files.ok()) return Status::error("--te-log-dir " + files.status().message());
  return std::unique_ptr<TeLogWriter>(new TeLogWriter(std::move(files).value(), limits));
}

TeLogWriter::TeLogWriter(std::unique_ptr<te::NvdlfwLogFiles> files, TeLogLimits limits)
    : files_(std::move(files)), limits_(limits) {
  thread_ = std::thread([this] { run(); });
}

TeLogWriter::~TeLogWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TeLogWriter::drop(TeLogDrop why, std::uint64_t lines) { counts_.dropped[static_cast<std::size_t>(why)] += lines; }

namespace {

// The policy's logged stats as the TE log reads them; a feature TE does not log is left out.
te::TeConfig logged_config(const std::vector<PolicyLoggedStats>& logged) {
  te::TeConfig config;
  for (const PolicyLoggedStats& l : logged) {
    const te::FeatureName* feature = te::feature_named(l.feature, true);
    if (feature != nullptr) config.logged.push_back({l.rule, feature->role, l.operand, l.stats});
  }
  return config;
}

}  // namespace

TeLogWriter::Block TeLogWriter::lines_of(const std::vector<history::HistoryRecord>& records,
                                         const SamplingPolicy& policy) {
  Block b{records.front().job, records.front().rank, {}, 0};
  std::lock_guard<std::mutex> lock(logs_mu_);
  auto it = logs_.find(b.job);
  if (it == logs_.end() || it->second.policy_version != policy.version) {
    if (it == logs_.end() && logs_.size() >= kJobsRemembered) logs_.clear();
    JobLog fresh{policy.version,
                 policy.te_logged.empty() ? te::NvdlfwLog() : te::NvdlfwLog(logged_config(policy.te_logged))};
    fresh.log.remember_steps(kStepsRemembered);
    it = logs_.insert_or_assign(b.job, std::move(fresh)).first;
  }
  for (const history::HistoryRecord& r : records) {
    for (const te::NvdlfwLine& line : it->second.log.lines(r)) {
      b.text += line.text;
      b.text += '\n';
      ++b.lines;
    }
  }
  return b;
}

void TeLogWriter::add(const std::vector<history::HistoryRecord>& records, const SamplingPolicy& policy) {
  if (records.empty()) return;
  Block b = lines_of(records, policy);
  if (b.lines == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_bytes_ + b.text.size() > limits_.queue_bytes) {
      drop(TeLogDrop::kQueueFull, b.lines);
      return;
    }
    queued_bytes_ += b.text.size();
    queue_.push_back(std::move(b));
  }
  wake_.notify_one();
}

TeLogCounts TeLogWriter::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

void TeLogWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is written
    Block b = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= b.text.size();
    lock.unlock();
    write(b);
    lock.lock();
  }
}

// On the writer thread; says in the log when writing starts and stops failing, and each limit
// the first time it is reached, not once a block.
void TeLogWriter::write(const Block& b) {
  const auto now = std::chrono::steady_clock::now();
  const std::pair<std::string, std::uint32_t> file{b.job, b.rank};
  if (const auto it = retry_at_.find(file); it != retry_at_.end() && now < it->second) {
    std::lock_guard<std::mutex> lock(mu_);  // not tried: its last write failed less than retry_after ago
    return drop(TeLogDrop::kWriteFailed, b.lines);
  }
  const te::AppendOutcome outcome = files_->append(b.job, b.rank, b.text);
  std::lock_guard<std::mutex> lock(mu_);
  counts_.bytes = files_->bytes();
  switch (outcome) {
    case te::AppendOutcome::kWritten:
      counts_.lines += b.lines;
      if (retry_at_.erase(file) != 0 && retry_at_.empty()) spdlog::info("--te-log-dir: writing again");
      return;
    case te::AppendOutcome::kSizeLimit:
      if (!std::exchange(said_size_limit_, true)) {
        spdlog::warn("--te-log-dir: the logs hold {} bytes, the limit (--te-log-max-bytes); further lines are "
                     "dropped and counted",
                     files_->bytes());
      }
      return drop(TeLogDrop::kSizeLimit, b.lines);
    case te::AppendOutcome::kTooManyFiles:
      if (!std::exchange(said_too_many_files_, true)) {
        spdlog::warn("--te-log-dir: {} job and rank files are open for writing, the limit; lines of new ones are "
                     "dropped and counted",
                     limits_.max_files);
      }
      return drop(TeLogDrop::kTooManyFiles, b.lines);
    case te::AppendOutcome::kFailed:
      if (retry_at_.empty()) {
        spdlog::warn("--te-log-dir: {}; that file's lines are dropped and counted until a write to it succeeds",
                     files_->error());
      }
      // Bounded: past max_files failing files, those whose pause is over go first, then the oldest name.
      if (retry_at_.size() >= limits_.max_files) std::erase_if(retry_at_, [&](const auto& e) { return e.second <= now; });
      if (retry_at_.size() >= limits_.max_files) retry_at_.erase(retry_at_.begin());
      retry_at_[file] = now + limits_.retry_after;
      return drop(TeLogDrop::kWriteFailed, b.lines);
  }
}

}  // namespace fp8scope::server
