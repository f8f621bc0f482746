#include "fp8scope/ingest/ingest_queue.h"

#include <functional>
#include <string>

namespace fp8scope::server {

IngestQueue::IngestQueue(int shards) {
  for (int i = 0; i < (shards < 1 ? 1 : shards); ++i) shards_.push_back(std::make_unique<Shard>());
}

std::size_t tensor_key_hash(const Sample& s) {
  const std::string key = s.client->job + '\x1f' + s.client->run + '\x1f' + std::to_string(s.client->rank) + '\x1f' +
                          s.header.layer + '\x1f' + gemm_name(s.header.gemm) + '\x1f' +
                          operand_name(s.header.operand);
  return std::hash<std::string>{}(key);
}

std::size_t process_key_hash(const ClientInfo& c) {
  return std::hash<std::string>{}(c.job + '\x1f' + c.run + '\x1f' + std::to_string(c.rank));
}

void IngestQueue::push(Sample sample) {
  Shard& s = *shards_[tensor_key_hash(sample) % shards_.size()];
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.items.emplace_back(std::move(sample));
  }
  s.ready.notify_one();
}

bool IngestQueue::push(ScalarMark scalar) {
  Shard& s = *shards_[process_key_hash(*scalar.client) % shards_.size()];
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.scalars >= kMaxScalarsPerShard) return false;
    ++s.scalars;
    s.items.emplace_back(std::move(scalar));
  }
  s.ready.notify_one();
  return true;
}

std::optional<IngestItem> IngestQueue::pop(int shard) {
  Shard& s = *shards_[static_cast<std::size_t>(shard)];
  std::unique_lock<std::mutex> lock(s.mu);
  s.ready.wait(lock, [&] { return s.closed || !s.items.empty(); });
  if (s.items.empty()) return std::nullopt;
  IngestItem out = std::move(s.items.front());
  s.items.pop_front();
  if (std::holds_alternative<ScalarMark>(out)) --s.scalars;
  return out;
}

void IngestQueue::close() {
  for (auto& s : shards_) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->closed = true;
    }
    s->ready.notify_all();
  }
}

std::size_t IngestQueue::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard<std::mutex> lock(s->mu);
    n += s->items.size();
  }
  return n;
}

}  // namespace fp8scope::server
