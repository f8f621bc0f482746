#include "task_pool.h"

#include <atomic>

namespace fp8scope::cpu {

struct TaskPool::Batch {
  int n = 0;
  const std::function<void(int)>* fn = nullptr;
  std::atomic<int> next{0};
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::condition_variable done;
};

TaskPool::TaskPool(int workers) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

bool TaskPool::run_one(Batch& batch) {
  const int i = batch.next.fetch_add(1);
  if (i >= batch.n) return false;
  (*batch.fn)(i);
  if (batch.remaining.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(batch.mu);
    batch.done.notify_all();
  }
  return true;
}

void TaskPool::run(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  auto batch = std::make_shared<Batch>();
  batch->n = n;
  batch->fn = &fn;
  batch->remaining = n;
  if (n > 1 && !threads_.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(batch);
    }
    wake_.notify_all();
  }
  while (run_one(*batch)) {
  }
  std::unique_lock<std::mutex> lock(batch->mu);
  batch->done.wait(lock, [&] { return batch->remaining.load() == 0; });
}

void TaskPool::work() {
  for (;;) {
    std::shared_ptr<Batch> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      batch = queue_.front();
      // A batch whose indices are all claimed leaves the queue; its owner waits for the rest.
      if (batch->next.load() >= batch->n) {
        queue_.pop_front();
        continue;
      }
    }
    while (run_one(*batch)) {
    }
  }
}

}  // namespace fp8scope::cpu
