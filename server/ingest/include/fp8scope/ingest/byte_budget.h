// The daemon's memory budget for sample payloads: a stream reserves a sample's bytes as its chunks
// arrive (not what its header declares, so a client that declares a huge sample and stalls holds
// only what it sent) and the reservation travels with the sample until its analysis is done, so
// memory waiting in the pipeline never exceeds the budget. A full budget drops samples; it never
// blocks a training process.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace fp8scope::server {

class ByteBudget {
 public:
  explicit ByteBudget(std::uint64_t capacity) : capacity_(capacity) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  bool try_reserve(std::uint64_t bytes) {
    std::uint64_t used = used_.load();
    do {
      if (bytes > capacity_ - used) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes));
    return true;
  }
  void release(std::uint64_t bytes) { used_.fetch_sub(bytes); }

  std::uint64_t used() const { return used_.load(); }
  std::uint64_t capacity() const { return capacity_; }

 private:
  const std::uint64_t capacity_;
  std::atomic<std::uint64_t> used_{0};
};

// Bytes held from a budget, given back when the lease ends.
class BudgetLease {
 public:
  BudgetLease() = default;
  BudgetLease(ByteBudget* budget, std::uint64_t bytes) : budget_(budget), bytes_(bytes) {}
  BudgetLease(BudgetLease&& o) noexcept : budget_(std::exchange(o.budget_, nullptr)), bytes_(o.bytes_) {}
  BudgetLease& operator=(BudgetLease&& o) noexcept {
    if (this != &o) {
      reset();
      budget_ = std::exchange(o.budget_, nullptr);
      bytes_ = o.bytes_;
    }
    return *this;
  }
  ~BudgetLease() { reset(); }
  // Holds `bytes` more, or nothing more and false when the budget cannot give them.
  bool grow(std::uint64_t bytes) {
    if (budget_ == nullptr || !budget_->try_reserve(bytes)) return false;
    bytes_ += bytes;
    return true;
  }
  std::uint64_t bytes() const { return bytes_; }
  void reset() {
    if (budget_ != nullptr) budget_->release(bytes_);
    budget_ = nullptr;
  }

 private:
  ByteBudget* budget_ = nullptr;
  std::uint64_t bytes_ = 0;
};

}  // namespace fp8scope::server
