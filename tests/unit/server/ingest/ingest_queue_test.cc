// The ingest queue keeps each tensor's samples in one FIFO, in order, a process's scalars too, and
// drains after close; scalars are bounded by a count.
#include "fp8scope/ingest/ingest_queue.h"

#include <catch2/catch.hpp>
#include <thread>

using namespace fp8scope::server;

namespace {
Sample sample(const std::string& layer, std::uint64_t step) {
  Sample s;
  auto client = std::make_shared<ClientInfo>();
  client->job = "j";
  client->run = "r";
  s.client = client;
  s.header.layer = layer;
  s.header.step = step;
  return s;
}
}  // namespace

TEST_CASE("samples of one tensor come out of one FIFO in the order they went in", "[ingest_queue]") {
  IngestQueue q(3);
  for (std::uint64_t step = 0; step < 20; ++step) {
    q.push(sample("a", step));
    q.push(sample("b", step));
  }
  q.close();
  std::map<std::string, std::vector<std::uint64_t>> seen;
  std::map<std::string, int> shard_of;
  for (int shard = 0; shard < 3; ++shard) {
    while (auto item = q.pop(shard)) {
      const Sample& s = std::get<Sample>(*item);
      seen[s.header.layer].push_back(s.header.step);
      CHECK(shard_of.emplace(s.header.layer, shard).first->second == shard);
    }
  }
  for (const auto& [layer, steps] : seen) {
    CHECK(steps.size() == 20);
    CHECK(std::is_sorted(steps.begin(), steps.end()));
  }
}

TEST_CASE("pop blocks until a sample arrives, and returns nothing once closed and empty", "[ingest_queue]") {
  IngestQueue q(1);
  std::thread producer([&] { q.push(sample("x", 1)); });
  auto s = q.pop(0);
  producer.join();
  REQUIRE(s);
  CHECK(std::get<Sample>(*s).header.step == 1);
  q.close();
  CHECK(!q.pop(0));
}

TEST_CASE("a process's scalars keep their order and are bounded per FIFO", "[ingest_queue]") {
  IngestQueue q(2);
  const Sample any = sample("a", 0);
  for (std::uint64_t step = 0; step < 5; ++step) REQUIRE(q.push(ScalarMark{any.client, 1.0, step, "loss", 0.5}));
  q.close();
  std::vector<std::uint64_t> steps;
  for (int shard = 0; shard < 2; ++shard) {
    while (auto item = q.pop(shard)) steps.push_back(std::get<ScalarMark>(*item).step);
  }
  CHECK(steps == std::vector<std::uint64_t>{0, 1, 2, 3, 4});

  IngestQueue full(1);
  for (std::size_t i = 0; i < IngestQueue::kMaxScalarsPerShard; ++i) {
    REQUIRE(full.push(ScalarMark{any.client, 1.0, i, "loss", 0.5}));
  }
  CHECK_FALSE(full.push(ScalarMark{any.client, 1.0, 0, "loss", 0.5}));
  full.push(sample("a", 1));  // samples are bounded by their budget, not by this count
  CHECK(full.size() == IngestQueue::kMaxScalarsPerShard + 1);
  REQUIRE(full.pop(0));
  CHECK(full.push(ScalarMark{any.client, 1.0, 0, "loss", 0.5}));  // room again
}
