// Reassembles one stream's tensor samples from their chunks: validates the header of the first
// chunk, reserves each chunk's bytes from the daemon's budget as it arrives, checks that chunks come in order without
// gaps, and yields the sample when its last chunk arrives. One sample at a time per stream; a
// sample that is refused has its remaining chunks skipped quietly. Holds no locks and does no I/O,
// so it is tested and fuzzed directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fp8scope/ingest/byte_budget.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/ingest/sample.h"
#include "fp8scope/ingest/sample_validation.h"

namespace fp8scope::server {

struct AssemblerLimits {
  std::uint64_t max_sample_bytes = 512ull << 20;
  std::uint64_t max_chunk_bytes = 4ull << 20;
};

// A chunk's bytes: those it carries, or `shared_size` bytes of a client's shared memory it names
// instead (not bound by max_chunk_bytes: no message carries them), which `read_shared` copies into
// the payload (the caller's I/O, not the assembler's); or why that range cannot be read.
struct ChunkBytes {
  std::span<const std::uint8_t> bytes;
  bool shared = false;
  std::uint64_t shared_size = 0;
  std::function<Status(std::uint8_t* into)> read_shared;
  std::optional<Refusal> unreadable;
  std::uint64_t size() const { return shared ? shared_size : bytes.size(); }
};
// The bytes a chunk carries itself.
ChunkBytes carried_bytes(const v1::TensorChunk& chunk);

struct AssemblerEvent {
  enum class Kind { kComplete, kRejected, kDropped };
  Kind kind = Kind::kComplete;
  std::uint64_t sample_id = 0;
  Refusal refusal;  // kRejected / kDropped
  std::optional<Sample> sample;  // kComplete
};

class SampleAssembler {
 public:
  SampleAssembler(std::shared_ptr<const ClientInfo> client, AssemblerLimits limits, ByteBudget* budget)
      : client_(std::move(client)), limits_(limits), budget_(budget) {}

  // Feeds one chunk; returns what it settled: nothing, or the sample it completed or refused. A
  // chunk that starts a new sample while another is unfinished settles both (two events).
  std::vector<AssemblerEvent> add(const v1::TensorChunk& chunk);
  // The same, with the chunk's bytes found elsewhere (shared memory).
  std::vector<AssemblerEvent> add(const v1::TensorChunk& chunk, const ChunkBytes& bytes);

  // The stream ended: drops a sample still being received, returning its id.
  std::optional<std::uint64_t> abandon();

 private:
  std::optional<AssemblerEvent> add_one(const v1::TensorChunk& chunk, const ChunkBytes& bytes);
  AssemblerEvent refuse(AssemblerEvent::Kind kind, std::string reason, std::string message);

  std::shared_ptr<const ClientInfo> client_;
  AssemblerLimits limits_;
  ByteBudget* budget_;
  std::optional<Sample> current_;  // being received
  std::uint64_t current_id_ = 0;
  std::uint64_t received_ = 0;
  std::optional<std::uint64_t> skipping_;  // id of a refused sample whose chunks are ignored
  std::optional<std::uint64_t> last_id_;
};

}  // namespace fp8scope::server
