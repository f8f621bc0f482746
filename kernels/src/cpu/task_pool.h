// A fixed set of worker threads that run index ranges for the CPU engine. Several callers (the
// daemon's analysis workers) may run batches at once; each caller also works on its own batch, so
// a batch always finishes even when every worker is busy elsewhere.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fp8scope::cpu {

class TaskPool {
 public:
  explicit TaskPool(int workers);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  int workers() const { return static_cast<int>(threads_.size()); }

  // Calls fn(i) once for every i in [0, n) and returns when all calls have returned.
  void run(int n, const std::function<void(int)>& fn);

 private:
  struct Batch;
  void work();
  static bool run_one(Batch& batch);

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Batch>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace fp8scope::cpu
