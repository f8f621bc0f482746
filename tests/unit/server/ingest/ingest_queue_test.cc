// The ingest queue keeps each tensor's samples in one FIFO, in order, and drains after close.
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
    while (auto s = q.pop(shard)) {
      seen[s->header.layer].push_back(s->header.step);
      CHECK(shard_of.emplace(s->header.layer, shard).first->second == shard);
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
  CHECK(s->header.step == 1);
  q.close();
  CHECK(!q.pop(0));
}
