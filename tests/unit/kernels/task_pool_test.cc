// The CPU engine's worker pool: every index runs once, also with several callers at once.
#include "task_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

using fp8scope::cpu::TaskPool;

TEST_CASE("every index runs exactly once", "[task_pool]") {
  TaskPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.run(1000, [&](int i) { hits[static_cast<std::size_t>(i)]++; });
  for (auto& h : hits) CHECK(h.load() == 1);
}

TEST_CASE("a pool without workers runs on the caller", "[task_pool]") {
  TaskPool pool(0);
  int sum = 0;
  pool.run(10, [&](int i) { sum += i; });
  CHECK(sum == 45);
}

TEST_CASE("concurrent callers share the pool and each gets its own batch done", "[task_pool]") {
  TaskPool pool(2);
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 8; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) pool.run(37, [&](int i) { total += i; });
    });
  }
  for (auto& t : callers) t.join();
  CHECK(total.load() == 8L * 50 * (36 * 37 / 2));
}
