#include "fp8scope/history/history_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "backend.h"
#include "history_location.h"
#include "postgres_backend.h"
#include "sqlite_backend.h"

namespace fp8scope::history {
namespace {

constexpr std::size_t kBatchItems = 4096;
constexpr double kExpiryEverySeconds = 3600;

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<std::unique_ptr<Backend>> open_backend(const std::string& location, const std::string& writer, bool read_only) {
  Result<HistoryLocation> where = parse_history_location(location);
  if (!where.ok()) return where.status();
  if (where.value().kind == HistoryLocation::Kind::kPostgres) {
    return open_postgres_backend(where.value().target, read_only ? std::string() : writer.empty() ? "fp8scoped" : writer);
  }
  const std::filesystem::path file(where.value().target);
  std::error_code ec;
  if (read_only) {
    if (!std::filesystem::exists(file, ec)) {
      return Status::error(location + ": no history there (expected fp8scoped's --data-dir, a history.sqlite file or a "
                                      "postgresql:// URL)");
    }
  } else if (file.has_parent_path()) {
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) return Status::error("--history " + location + ": cannot create " + file.parent_path().string() + ": " + ec.message());
  }
  return open_sqlite_backend(file.string(), read_only);
}

}  // namespace

Result<std::unique_ptr<HistoryReader>> open_history_reader(const std::string& location) {
  Result<std::unique_ptr<Backend>> backend = open_backend(location, "", true);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<HistoryReader>(std::move(backend).value());
}

Result<std::unique_ptr<HistoryStore>> HistoryStore::open(const std::string& location, const HistoryStoreOptions& options) {
  Result<std::unique_ptr<Backend>> backend = open_backend(location, options.writer, false);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<HistoryStore>(new HistoryStore(std::move(backend).value(), options));
}

HistoryStore::HistoryStore(std::unique_ptr<Backend> backend, HistoryStoreOptions options)
    : backend_(std::move(backend)), options_(std::move(options)), records_(backend_->records_at_open()) {
  writer_ = std::thread([this] { writer_loop(); });
}

HistoryStore::~HistoryStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

const HistoryReader& HistoryStore::reader() const { return *backend_; }
std::string HistoryStore::location() const { return backend_->location(); }

void HistoryStore::add(HistoryRecord record) { enqueue(std::move(record)); }
void HistoryStore::add(GemmOutputRecord record) { enqueue(std::move(record)); }
void HistoryStore::add(ScalarRecord record) { enqueue(std::move(record)); }
void HistoryStore::add_sample(std::vector<HistoryRecord> records, std::optional<SampleTicket> stored_sample) {
  std::vector<Item> items;
  items.reserve(records.size() + 1);
  for (HistoryRecord& r : records) items.emplace_back(std::move(r));
  if (stored_sample) items.emplace_back(*stored_sample);
  enqueue(items);
}

void HistoryStore::on_stored_sample(std::function<void(const SampleTicket&, bool)> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  sample_listener_ = std::move(listener);
}

void HistoryStore::enqueue(Item item) { enqueue(std::span<Item>(&item, 1)); }

void HistoryStore::enqueue(std::span<Item> items) {
  std::vector<SampleTicket> dropped_samples;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Item& item : items) pending_.push_back(std::move(item));
    enqueued_ += items.size();
    while (pending_.size() > kMaxPendingRecords) {  // writes have failed for long: the oldest go
      if (const auto* t = std::get_if<SampleTicket>(&pending_.front())) {
        dropped_samples.push_back(*t);
      } else {
        ++lost_;
      }
      pending_.pop_front();
      ++written_;
      committed_.notify_all();
    }
  }
  for (const SampleTicket& t : dropped_samples) {
    if (sample_listener_) sample_listener_(t, false);
  }
  wake_.notify_one();
}

Result<std::vector<SampleTicket>> HistoryStore::unstored(const std::vector<SampleTicket>& accepted) const {
  return backend_->unstored(accepted);
}

Status HistoryStore::forget_stored_samples() { return backend_->forget_stored_samples(); }

Status HistoryStore::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const std::uint64_t target = enqueued_;
  const std::uint64_t failures = failed_writes_;
  flush_requested_ = true;
  wake_.notify_one();
  // Everything written, or one more failed attempt: a failing database must not hold a shutdown.
  committed_.wait(lock, [&] { return written_ >= target || failed_writes_ > failures; });
  if (written_ >= target) return Status();
  return Status::error(std::to_string(pending_.size()) + " records are not written: " + last_error_);
}

HistoryStore::WriteHealth HistoryStore::write_health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {last_error_, failed_writes_, lost_, pending_.size() + writing_, expired_};
}

std::uint64_t HistoryStore::stored() const {
  std::lock_guard<std::mutex> committing(commit_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

void HistoryStore::expire_old_rows() {
  if (options_.retention_days <= 0 || steady_seconds() < next_expiry_) return;
  next_expiry_ = steady_seconds() + kExpiryEverySeconds;
  Result<std::uint64_t> deleted = backend_->delete_before(epoch_seconds() - options_.retention_days * 86400);
  if (!deleted.ok()) {
    spdlog::warn("history: retention ({} days) failed, retried in an hour: {}", options_.retention_days, deleted.message());
    return;
  }
  if (deleted.value() > 0) {
    spdlog::info("history: {} records older than {} days deleted", deleted.value(), options_.retention_days);
  }
  std::lock_guard<std::mutex> lock(mu_);
  expired_ += deleted.value();
}

// Waits for work, then takes up to kBatchItems queued items straight into the batch's typed rows
// (one copy of a batch in memory). Nothing taken and stopping: the writer ends (nullopt).
std::optional<WriteBatch> HistoryStore::take_batch(std::chrono::milliseconds backoff, std::size_t& taken) {
  WriteBatch batch;
  taken = 0;
  std::unique_lock<std::mutex> lock(mu_);
  if (backoff.count() > 0) {
    wake_.wait_for(lock, backoff, [&] { return stopping_ || flush_requested_; });
  } else {
    wake_.wait_for(lock, std::chrono::milliseconds(200),
                   [&] { return stopping_ || flush_requested_ || pending_.size() >= 512; });
  }
  flush_requested_ = false;
  if (pending_.empty() && stopping_) return std::nullopt;
  // A sample's records come right before its ticket (add_sample): past kBatchItems the batch still
  // takes records up to the next item that is not one, so a ticket never commits apart from them.
  bool in_sample = false;
  for (; !pending_.empty() && (taken < kBatchItems || in_sample); ++taken) {
    in_sample = std::holds_alternative<HistoryRecord>(pending_.front());
    std::visit(
        [&](auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, HistoryRecord>) batch.records.push_back(std::move(v));
          if constexpr (std::is_same_v<T, GemmOutputRecord>) batch.gemm_outputs.push_back(std::move(v));
          if constexpr (std::is_same_v<T, ScalarRecord>) batch.scalars.push_back(std::move(v));
          if constexpr (std::is_same_v<T, SampleTicket>) batch.stored_samples.push_back(v);
        },
        pending_.front());
    pending_.pop_front();
  }
  writing_ = taken;
  return batch;
}

// A failed batch goes back to the front of the queue for the next attempt (0.1 s, doubling to
// 10 s), told once per failure streak; at shutdown what is left is lost, and said so.
void HistoryStore::keep_for_retry(WriteBatch& batch, std::size_t taken, const Status& s,
                                  std::chrono::milliseconds& backoff) {
  if (last_error_.empty()) {
    spdlog::error("history: cannot write {}: {}; {} records kept in memory and retried", backend_->location(),
                  s.message(), taken + pending_.size());
  }
  last_error_ = s.message();
  ++failed_writes_;
  // By kind: a sample's ticket stays after its records.
  const auto put_back = [&](auto& rows) {
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) pending_.push_front(std::move(*it));
  };
  put_back(batch.stored_samples);
  put_back(batch.scalars);
  put_back(batch.gemm_outputs);
  put_back(batch.records);
  backoff = std::min<std::chrono::milliseconds>(
      std::max<std::chrono::milliseconds>(backoff * 2, std::chrono::milliseconds(100)), std::chrono::seconds(10));
  if (!stopping_) return;
  for (const Item& item : pending_) {
    if (const auto* t = std::get_if<SampleTicket>(&item)) {
      if (sample_listener_) sample_listener_(*t, false);
    } else {
      ++lost_;
    }
  }
  written_ += pending_.size();
  pending_.clear();
}

void HistoryStore::writer_loop() {
  auto backoff = std::chrono::milliseconds(0);
  for (;;) {
    std::size_t taken = 0;
    std::optional<WriteBatch> batch = take_batch(backoff, taken);
    if (!batch) return;
    if (backoff.count() == 0) expire_old_rows();
    if (taken == 0) continue;
    std::unique_lock<std::mutex> committing(commit_mu_);
    const Status s = backend_->write(*batch);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (s.ok()) records_ += batch->records.size();
    }
    committing.unlock();
    if (s.ok() && sample_listener_) {
      for (const SampleTicket& t : batch->stored_samples) sample_listener_(t, true);
    }
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = 0;
    if (s.ok()) {
      written_ += taken;
      if (!last_error_.empty()) {
        spdlog::warn("history: writes to {} resumed; {} attempts had failed, the last with: {}", backend_->location(),
                     failed_writes_, last_error_);
      }
      last_error_.clear();
      backoff = std::chrono::milliseconds(0);
    } else {
      keep_for_retry(*batch, taken, s, backoff);
    }
    committed_.notify_all();
  }
}

}  // namespace fp8scope::history
