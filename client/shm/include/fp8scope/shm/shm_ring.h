// The shared memory between the hook (inside the training process) and its shipper: a memfd the
// hook creates, maps, and hands to the shipper it spawns (inherited as fd FP8SCOPE_SHM_FD). It holds
// a byte ring of records (samples, steps, scalars) written by the hook and drained by the shipper,
// the sampling policy the shipper receives from the daemon, and the drop counters both sides keep.
// Plain C++ and atomics only: the hook links neither gRPC nor protobuf. Both sides treat the other
// as untrusted: every record is checked before it is read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <optional>

#include "fp8scope/vocabulary/client_drop.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/scale_layout.h"
#include "fp8scope/wire/sampling_rule.h"

namespace fp8scope::shm {

inline constexpr std::uint32_t kMagic = 0x38504653u;  // "SFP8"
// 2: records carry scale tensors; 3: experts; 4: rules; 5: casts; 6: the graph drop counters;
// 7: GEMM outputs (a rule's tensor bits four to a role)
inline constexpr std::uint32_t kLayoutVersion = 7;
inline constexpr std::size_t kAlign = 64;  // records start on cache lines
inline constexpr const char* kShmFdEnv = "FP8SCOPE_SHM_FD";

// Why a sample never reached the daemon (vocabulary/client_drop.h): the ring's counters, by row.
using DropReason = ClientDrop;

enum class RecordKind : std::uint32_t { kPadding = 1, kSample = 2, kStep = 3, kScalar = 4 };

// The Transformer Engine cast that wrote a sample's codes, captured at its call and paired with
// the GEMM by the output's device pointer (DESIGN.md "The casts"). Its part of the payload
// (CastScalars, then the parts vocabulary/cast_capture.h's cast_layout() places) follows the scale
// tensor. Enum fields carry the vocabulary's values.
struct CastRecord {
  std::uint32_t source;                    // CastSource value + 1; 0: the sample has no cast part
  std::uint32_t recipe;                    // RecipeKind of the job's scaling mode (flags refine it)
  std::uint32_t input_dtype, param_dtype;  // DType of the input, and of gamma, beta, the matrix
  std::uint32_t activation;                // Activation value + 1 of an activation source; 0: none
  std::uint32_t flags;                     // kCast* below
  std::int64_t rows, cols;                 // the input as a matrix (a gated activation's: both halves)
  float epsilon;                           // the norm's eps; block scaling's amax epsilon
  float limit, alpha, linear_offset;       // a clamped SwiGLU's
  std::uint64_t bytes;                     // the cast part: cast_layout().total
  char entry_point[48];                    // "nvte_quantize_v2", ...
};
inline constexpr std::uint32_t kCastColumnwise = 1u << 0;  // the GEMM read the column-wise copy
inline constexpr std::uint32_t kCastTransposed = 1u << 1;  // whose codes are the input's transpose
inline constexpr std::uint32_t kCastZeroCenteredGamma = 1u << 2;
inline constexpr std::uint32_t kCastStochastic = 1u << 3;   // NVFP4 stochastic rounding
inline constexpr std::uint32_t kCastPowerOf2 = 1u << 4;     // block scaling's power-of-2 scales
inline constexpr std::uint32_t kCast2d = 1u << 5;           // NVFP4's 16x16 or MXFP8's 32x32 blocks
inline constexpr std::uint32_t kCastRowScaled = 1u << 6;    // NVFP4 with one amax per row
inline constexpr std::uint32_t kCastFourOverSix = 1u << 7;  // NVFP4 4over6, TE's default (MAE) pick
inline constexpr std::uint32_t kCastUnmodeled = 1u << 8;    // an option fp8scope does not model (no code check)

// One record's header; a sample's payload (the codes, then their scale tensor, then its cast's
// part, then an expert sample's tokens per expert) follows it. Enum fields carry the vocabulary's values (GemmRole,
// Operand, DType, ScaleLayout); the shipper turns them into wire values through its tables.
struct alignas(kAlign) RecordHeader {
  std::uint32_t magic;
  RecordKind kind;
  std::uint64_t record_bytes;  // header + payload, a multiple of kAlign
  std::uint64_t step;
  char name[256];              // sample: layer label; scalar: its name; NUL-terminated
  char source_call[32];        // "cublasLtMatmul", "cublasGemmEx", ...
  std::uint32_t gemm, operand, dtype, scale_layout;
  std::uint32_t ndim;
  std::int64_t shape[4];       // logical shape in elements, last dimension contiguous
  std::int64_t leading_dimension;
  float scale_inv;             // per-tensor scaled codes: written by the device-to-host copy
  float gemm_alpha;            // FP4 GEMMs: the alpha (NVFP4's per-tensor scales), copied or read; 0 = none
  std::uint32_t k_is_outer;    // block scales run along the first dimension (see TensorHeader)
  double value;                // scalar records
  std::uint64_t payload_bytes; // codes, scales and tokens
  std::uint64_t scale_bytes;   // of which the scale tensor, after the codes
  // Mixture-of-experts GEMMs: the expert (-1: none), the experts of the call (0: not known), the
  // rows of shape[0] that hold tokens (0: all; the rest is padding), and the payload's last
  // tokens_bytes: one uint64 per expert of the call, the tokens routed to it.
  std::int32_t expert;
  std::uint32_t experts;
  std::uint64_t valid_rows;
  std::uint64_t tokens_bytes;
  CastRecord cast;
};

// The sampling policy as the shipper last received it (wire Policy fields, flattened).
struct PolicyCopy {
  std::uint64_t version = 0;  // the daemon's policy version; 0 = none received yet
  std::uint64_t every_n_steps = 0, start_step = 0, end_step = 0, max_bytes_per_step = 0;
  std::uint32_t operand_mask = 0;  // bit (1 << Operand value); 0 = those sampled by default
  std::uint32_t experts_per_call = 0;  // batched and grouped GEMMs; 0 = every expert
  char layer_regex[1024] = {};     // NUL-terminated
  std::uint32_t rule_count = 0;    // with any, the rules replace the selection above
  SamplingRule rules[kMaxSamplingRules];
};

// A copy's strings terminated and its counts in bounds, whatever the other side wrote.
inline void bound(PolicyCopy& p) {
  p.layer_regex[sizeof p.layer_regex - 1] = '\0';
  if (p.rule_count > kMaxSamplingRules) p.rule_count = kMaxSamplingRules;
  for (SamplingRule& r : p.rules) {
    r.layer_regex[sizeof r.layer_regex - 1] = '\0';
    r.and_layer_regex[sizeof r.and_layer_regex - 1] = '\0';
    if (r.range_count > kMaxRuleStepRanges) r.range_count = kMaxRuleStepRanges;
  }
}

// A seqlock around it: the shipper makes seq odd, writes, makes it even; the hook copies and
// retries while seq is odd or moved, a bounded number of times, so it never waits on the shipper.
struct PolicyBlock {
  std::atomic<std::uint64_t> seq;
  PolicyCopy policy;
};

struct alignas(kAlign) Header {
  std::uint32_t magic;
  std::uint32_t layout_version;
  std::uint64_t data_offset, data_bytes;  // the ring: [data_offset, data_offset + data_bytes)
  std::uint32_t producer_pid;
  alignas(kAlign) std::atomic<std::uint64_t> head;  // bytes the hook has published (monotonic)
  alignas(kAlign) std::atomic<std::uint64_t> tail;  // bytes the shipper is done with (monotonic)
  alignas(kAlign) std::atomic<std::uint64_t> dropped[kClientDropCount];
  std::atomic<std::uint64_t> samples_published, bytes_published, samples_sent, bytes_sent;
  std::atomic<std::uint32_t> shipper_connected;
  alignas(kAlign) PolicyBlock policy;
};

inline constexpr std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
inline constexpr std::size_t data_offset() { return round_up(sizeof(Header)); }

// Lays out a fresh segment of `total_bytes` (zero-filled, as a new memfd is). False if too small.
inline bool initialize(void* base, std::size_t total_bytes, std::uint32_t producer_pid) {
  if (total_bytes < data_offset() + 4 * sizeof(RecordHeader)) return false;
  auto* h = static_cast<Header*>(base);
  h->magic = kMagic;
  h->layout_version = kLayoutVersion;
  h->data_offset = data_offset();
  h->data_bytes = (total_bytes - data_offset()) / kAlign * kAlign;
  h->producer_pid = producer_pid;
  return true;
}

// The shipper's check of a segment it was handed.
inline bool valid(const void* base, std::size_t total_bytes) {
  if (total_bytes < data_offset()) return false;
  const auto* h = static_cast<const Header*>(base);
  return h->magic == kMagic && h->layout_version == kLayoutVersion && h->data_offset == data_offset() &&
         h->data_bytes % kAlign == 0 && h->data_bytes > 0 && h->data_offset + h->data_bytes <= total_bytes;
}

inline std::byte* data(Header* h) { return reinterpret_cast<std::byte*>(h) + h->data_offset; }

inline void count_drop(Header* h, DropReason reason, std::uint64_t n = 1) {
  const auto i = static_cast<std::size_t>(reason);
  if (h != nullptr && i < kClientDropCount) h->dropped[i].fetch_add(n, std::memory_order_relaxed);
}

// The producer's side. `reserved` is the producer's own position (ahead of head while records
// are being filled); only one thread reserves at a time.
class RingWriter {
 public:
  explicit RingWriter(Header* h) : h_(h), reserved_(h->head.load(std::memory_order_relaxed)) {}

  // Room for one record of `bytes` (a multiple of kAlign) at a position that does not wrap: a
  // padding record fills the end of the ring when needed. Returns the record's position, or
  // nothing when the shipper has not freed enough.
  std::optional<std::uint64_t> reserve(std::uint64_t bytes) {
    const std::uint64_t size = h_->data_bytes;
    if (bytes == 0 || bytes % kAlign != 0 || bytes > size) return std::nullopt;
    const std::uint64_t to_end = size - reserved_ % size;
    const std::uint64_t pad = bytes > to_end ? to_end : 0;
    if (reserved_ + pad + bytes - h_->tail.load(std::memory_order_acquire) > size) return std::nullopt;
    if (pad != 0) {
      RecordHeader* p = at(reserved_);
      p->magic = kMagic;
      p->kind = RecordKind::kPadding;
      p->record_bytes = pad;
    }
    const std::uint64_t pos = reserved_ + pad;
    reserved_ = pos + bytes;
    return pos;
  }

  RecordHeader* at(std::uint64_t pos) { return reinterpret_cast<RecordHeader*>(data(h_) + pos % h_->data_bytes); }

  // Makes every record up to `end` visible to the shipper (records are published in order).
  void publish(std::uint64_t end) { h_->head.store(end, std::memory_order_release); }

  std::uint64_t reserved() const { return reserved_; }

 private:
  Header* h_;
  std::uint64_t reserved_;
};

// The consumer's side: the next complete record, checked, or nothing. A record that fails the
// checks means the segment is corrupt: the reader skips everything published and says so. The
// reader keeps its own position; the ring's tail (what the hook may overwrite) moves only past
// records released, in ring order, so a record sent to the daemon by reference stays intact until
// the daemon has copied it, while later records are read meanwhile.
class RingReader {
 public:
  explicit RingReader(Header* h) : h_(h), read_(h->tail.load(std::memory_order_relaxed)) {}

  enum class Next { kRecord, kEmpty, kCorrupt };

  Next next(const RecordHeader** out) {
    const std::uint64_t size = h_->data_bytes;
    for (;;) {
      const std::uint64_t head = h_->head.load(std::memory_order_acquire);
      if (read_ == head) return Next::kEmpty;
      const std::uint64_t to_end = size - read_ % size;
      const auto* r = reinterpret_cast<const RecordHeader*>(data(h_) + read_ % size);
      const bool sane = head - read_ <= size && r->magic == kMagic && r->record_bytes % kAlign == 0 &&
                        r->record_bytes != 0 && r->record_bytes <= to_end && r->record_bytes <= head - read_;
      if (!sane) return corrupt(head);
      const std::uint64_t bytes = r->record_bytes;
      if (r->kind == RecordKind::kPadding) {
        taken_.push_back({read_, bytes, true});
        read_ += bytes;
        release_done();
        continue;
      }
      const bool fits = r->kind != RecordKind::kSample ||
                        (r->payload_bytes <= bytes - sizeof(RecordHeader) && r->ndim >= 1 && r->ndim <= 4 &&
                         r->scale_bytes <= r->payload_bytes && r->tokens_bytes <= r->payload_bytes - r->scale_bytes &&
                         r->tokens_bytes == 8ull * r->experts * (r->tokens_bytes != 0));
      if (!fits) return corrupt(head);
      taken_.push_back({read_, bytes, false});
      read_ += bytes;
      *out = r;
      return Next::kRecord;
    }
  }

  // Frees a record next() returned; the hook may reuse its bytes once every record before it is
  // freed too.
  void release(const RecordHeader* r) {
    const std::uint64_t offset = static_cast<std::uint64_t>(reinterpret_cast<const std::byte*>(r) - data(h_));
    for (Taken& t : taken_) {
      if (!t.released && t.position % h_->data_bytes == offset) {
        t.released = true;
        break;
      }
    }
    release_done();
  }

  // Records returned and not yet released.
  std::size_t held() const {
    std::size_t n = 0;
    for (const Taken& t : taken_) n += t.released ? 0 : 1;
    return n;
  }

  static const std::byte* payload(const RecordHeader* r) { return reinterpret_cast<const std::byte*>(r + 1); }

 private:
  struct Taken {
    std::uint64_t position, bytes;
    bool released;
  };

  // Advances the tail past the released records at the front.
  void release_done() {
    std::uint64_t tail = h_->tail.load(std::memory_order_relaxed);
    bool moved = false;
    while (!taken_.empty() && taken_.front().released) {
      tail = taken_.front().position + taken_.front().bytes;
      taken_.pop_front();
      moved = true;
    }
    if (moved) h_->tail.store(tail, std::memory_order_release);
  }

  // Skips everything published; records still held are given up (the hook may overwrite them).
  Next corrupt(std::uint64_t head) {
    taken_.clear();
    read_ = head;
    h_->tail.store(head, std::memory_order_release);
    return Next::kCorrupt;
  }

  Header* h_;
  std::uint64_t read_;
  std::deque<Taken> taken_;  // in ring order
};

// Policy exchange through the seqlock.
inline void write_policy(Header* h, const PolicyCopy& p) {
  PolicyBlock& b = h->policy;
  const std::uint64_t seq = b.seq.load(std::memory_order_relaxed);
  b.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  b.policy = p;
  bound(b.policy);
  b.seq.store(seq + 2, std::memory_order_release);
}

// A consistent copy into `out` (the copy is tens of KB: the caller keeps it off small stacks), or
// false if the writer was busy every time we looked.
inline bool read_policy(const Header* h, PolicyCopy& out, int attempts = 4) {
  const PolicyBlock& b = h->policy;
  for (int i = 0; i < attempts; ++i) {
    const std::uint64_t before = b.seq.load(std::memory_order_acquire);
    if (before % 2 != 0) continue;
    out = b.policy;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (b.seq.load(std::memory_order_relaxed) == before) {
      bound(out);
      return true;
    }
  }
  return false;
}

}  // namespace fp8scope::shm
