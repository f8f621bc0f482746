#include "fp8scope/ingest/sample_assembler.h"

#include <cstring>

namespace fp8scope::server {

AssemblerEvent SampleAssembler::refuse(AssemblerEvent::Kind kind, std::string reason, std::string message) {
  AssemblerEvent e;
  e.kind = kind;
  e.sample_id = current_id_;
  e.refusal = {std::move(reason), std::move(message)};
  current_.reset();  // returns the reservation
  skipping_ = current_id_;
  return e;
}

ChunkBytes carried_bytes(const v1::TensorChunk& chunk) {
  const auto* data = reinterpret_cast<const std::uint8_t*>(chunk.data().data());
  ChunkBytes carried;
  carried.bytes = {data, chunk.data().size()};
  return carried;
}

std::vector<AssemblerEvent> SampleAssembler::add(const v1::TensorChunk& chunk) {
  return add(chunk, carried_bytes(chunk));
}

std::vector<AssemblerEvent> SampleAssembler::add(const v1::TensorChunk& chunk, const ChunkBytes& bytes) {
  std::vector<AssemblerEvent> events;
  if (current_ && chunk.sample_id() != current_id_ && !(skipping_ && *skipping_ == chunk.sample_id())) {
    events.push_back(refuse(AssemblerEvent::Kind::kRejected, "gap",
                            "sample " + std::to_string(current_id_) + " was interrupted by sample " +
                                std::to_string(chunk.sample_id()) + " after " + std::to_string(received_) + " bytes"));
  }
  if (std::optional<AssemblerEvent> e = add_one(chunk, bytes)) events.push_back(std::move(*e));
  return events;
}

std::optional<AssemblerEvent> SampleAssembler::add_one(const v1::TensorChunk& chunk, const ChunkBytes& in) {
  const std::uint64_t id = chunk.sample_id();
  if (skipping_ && *skipping_ == id) return std::nullopt;
  if (!current_) {
    current_id_ = id;
    if (last_id_ && id <= *last_id_) {
      return refuse(AssemblerEvent::Kind::kRejected, "bad_sample_id",
                    "sample id " + std::to_string(id) + " is not above the previous one, " + std::to_string(*last_id_));
    }
    last_id_ = id;
    skipping_.reset();
    if (chunk.offset() != 0 || !chunk.has_header()) {
      return refuse(AssemblerEvent::Kind::kRejected, "gap",
                    "sample " + std::to_string(id) + " does not start with a header chunk at offset 0");
    }
    const HeaderCheck check = check_header(chunk.header(), limits_.max_sample_bytes);
    if (!check.header) return refuse(AssemblerEvent::Kind::kRejected, check.refusal.reason, check.refusal.message);
    current_.emplace();
    current_->lease = BudgetLease(budget_, 0);
    current_->client = client_;
    current_->header = std::move(*check.header);
    current_->payload.resize(current_->header.payload_bytes());
    received_ = 0;
  }
  if (in.unreadable) return refuse(AssemblerEvent::Kind::kRejected, in.unreadable->reason, in.unreadable->message);
  const std::uint64_t size = in.size();
  if (!in.shared && size > limits_.max_chunk_bytes) {
    return refuse(AssemblerEvent::Kind::kRejected, "chunk_too_large",
                  "chunk of " + std::to_string(size) + " bytes exceeds " + std::to_string(limits_.max_chunk_bytes));
  }
  if (chunk.offset() != received_) {
    return refuse(AssemblerEvent::Kind::kRejected, "gap",
                  "sample " + std::to_string(id) + ": expected a chunk at offset " + std::to_string(received_) +
                      ", got " + std::to_string(chunk.offset()));
  }
  if (size > current_->payload.size() - received_) {
    return refuse(AssemblerEvent::Kind::kRejected, "size_mismatch",
                  "sample " + std::to_string(id) + ": chunks carry more than payload_bytes " +
                      std::to_string(current_->payload.size()));
  }
  if (!current_->lease.grow(size)) {
    return refuse(AssemblerEvent::Kind::kDropped, "queue_full",
                  "the daemon's queue memory budget is full (" + std::to_string(budget_->used()) + " of " +
                      std::to_string(budget_->capacity()) + " bytes)");
  }
  if (in.shared && size > 0) {
    if (const Status read = in.read_shared(current_->payload.data() + received_); !read.ok()) {
      return refuse(AssemblerEvent::Kind::kRejected, "bad_region",
                    "sample " + std::to_string(id) + ": its shared memory could not be read: " + read.message());
    }
  } else if (size > 0) {
    std::memcpy(current_->payload.data() + received_, in.bytes.data(), size);
  }
  received_ += size;
  if (!chunk.last()) return std::nullopt;
  if (received_ != current_->payload.size()) {
    return refuse(AssemblerEvent::Kind::kRejected, "size_mismatch",
                  "sample " + std::to_string(id) + " ended after " + std::to_string(received_) + " of " +
                      std::to_string(current_->payload.size()) + " bytes");
  }
  AssemblerEvent e;
  e.kind = AssemblerEvent::Kind::kComplete;
  e.sample_id = id;
  current_->completed = std::chrono::steady_clock::now();
  e.sample = std::move(current_);
  current_.reset();
  return e;
}

std::optional<std::uint64_t> SampleAssembler::abandon() {
  if (!current_) return std::nullopt;
  current_.reset();
  return current_id_;
}

}  // namespace fp8scope::server
