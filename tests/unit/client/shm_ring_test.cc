// The shared ring between hook and shipper: records come out in order with their bytes, the ring
// wraps with padding and refuses what does not fit until the reader frees it, a corrupt record is
// skipped rather than read, and the policy seqlock never hands out a torn copy.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "fp8scope/shm/shm_ring.h"

using namespace fp8scope::shm;

namespace {

struct Segment {
  explicit Segment(std::size_t ring_bytes) : bytes(data_offset() + ring_bytes), memory(bytes / kAlign + 1) {
    REQUIRE(initialize(base(), bytes, 42));
  }
  void* base() { return memory.data(); }
  Header* header() { return static_cast<Header*>(base()); }
  std::size_t bytes;
  struct alignas(kAlign) Line {
    unsigned char b[kAlign];
  };
  std::vector<Line> memory;
};

// Writes one sample record whose payload is `n` copies of `fill`; returns false when it did not fit.
bool write_sample(RingWriter& w, std::uint64_t step, std::size_t n, unsigned char fill) {
  const std::uint64_t bytes = round_up(sizeof(RecordHeader) + n);
  const auto pos = w.reserve(bytes);
  if (!pos) return false;
  RecordHeader* r = w.at(*pos);
  std::memset(r, 0, sizeof *r);
  r->magic = kMagic;
  r->kind = RecordKind::kSample;
  r->record_bytes = bytes;
  r->step = step;
  r->ndim = 1;
  r->shape[0] = static_cast<std::int64_t>(n);
  r->payload_bytes = n;
  std::memset(r + 1, fill, n);
  w.publish(*pos + bytes);
  return true;
}

}  // namespace

TEST_CASE("records come out in order, with their payload", "[shm]") {
  Segment s(64 * 1024);
  REQUIRE(valid(s.base(), s.bytes));
  RingWriter w(s.header());
  RingReader r(s.header());
  for (std::uint64_t step = 0; step < 10; ++step) REQUIRE(write_sample(w, step, 100 + step, static_cast<unsigned char>(step)));
  for (std::uint64_t step = 0; step < 10; ++step) {
    const RecordHeader* rec = nullptr;
    REQUIRE(r.next(&rec) == RingReader::Next::kRecord);
    CHECK(rec->step == step);
    CHECK(rec->payload_bytes == 100 + step);
    CHECK(RingReader::payload(rec)[rec->payload_bytes - 1] == static_cast<std::byte>(step));
    r.release(rec);
  }
  const RecordHeader* none = nullptr;
  CHECK(r.next(&none) == RingReader::Next::kEmpty);
}

TEST_CASE("a full ring refuses until the reader frees space, and wraps with padding", "[shm]") {
  Segment s(8 * 1024);
  RingWriter w(s.header());
  RingReader r(s.header());
  // Records of 1536 bytes: five fit in 8 KiB, the sixth does not.
  int written = 0;
  while (write_sample(w, static_cast<std::uint64_t>(written), 1536 - sizeof(RecordHeader), 1)) ++written;
  CHECK(written == 5);
  const RecordHeader* rec = nullptr;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(r.next(&rec) == RingReader::Next::kRecord);
    r.release(rec);
  }
  // 512 bytes remain before the end: the next record pads them and starts over at the beginning.
  REQUIRE(write_sample(w, 99, 1536 - sizeof(RecordHeader), 7));
  for (int i = 0; i < 3; ++i) {
    REQUIRE(r.next(&rec) == RingReader::Next::kRecord);
    r.release(rec);
  }
  REQUIRE(r.next(&rec) == RingReader::Next::kRecord);
  CHECK(rec->step == 99);
  CHECK(reinterpret_cast<const std::byte*>(rec) == reinterpret_cast<std::byte*>(s.header()) + s.header()->data_offset);
  r.release(rec);
  CHECK(r.next(&rec) == RingReader::Next::kEmpty);
  // Larger than the ring: never fits.
  CHECK_FALSE(w.reserve(round_up(16 * 1024)));
}

TEST_CASE("a record held past later ones keeps its bytes until released, and the tail moves in ring order",
          "[shm]") {
  Segment s(8 * 1024);
  RingWriter w(s.header());
  RingReader r(s.header());
  // Records of 1536 bytes: five fit.
  for (std::uint64_t step = 0; step < 5; ++step) REQUIRE(write_sample(w, step, 1536 - sizeof(RecordHeader), 1));
  const RecordHeader* held = nullptr;
  REQUIRE(r.next(&held) == RingReader::Next::kRecord);  // sent by reference: released on the daemon's ack
  const RecordHeader* rec = nullptr;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(r.next(&rec) == RingReader::Next::kRecord);
    r.release(rec);
  }
  CHECK(r.held() == 1);
  CHECK(s.header()->tail.load() == 0);  // nothing is free while the first record is held
  CHECK_FALSE(write_sample(w, 9, 1536 - sizeof(RecordHeader), 9));
  CHECK(held->step == 0);
  r.release(held);
  CHECK(r.held() == 0);
  CHECK(s.header()->tail.load() == 5 * 1536);
  REQUIRE(write_sample(w, 9, 1536 - sizeof(RecordHeader), 9));
  REQUIRE(r.next(&rec) == RingReader::Next::kRecord);
  CHECK(rec->step == 9);
}

TEST_CASE("a corrupt record is skipped, never read past", "[shm]") {
  Segment s(16 * 1024);
  RingWriter w(s.header());
  RingReader r(s.header());
  REQUIRE(write_sample(w, 1, 64, 1));
  RecordHeader* first = w.at(0);
  SECTION("a record longer than what was published") { first->record_bytes = 8 * 1024; }
  SECTION("a payload larger than its record") { first->payload_bytes = 4096; }
  SECTION("a wrong magic") { first->magic = 0; }
  const RecordHeader* rec = nullptr;
  CHECK(r.next(&rec) == RingReader::Next::kCorrupt);
  CHECK(r.next(&rec) == RingReader::Next::kEmpty);
  // The ring is usable again.
  REQUIRE(write_sample(w, 2, 64, 2));
  REQUIRE(r.next(&rec) == RingReader::Next::kRecord);
  CHECK(rec->step == 2);
}

TEST_CASE("a segment from another version or too small is not valid", "[shm]") {
  Segment s(4096);
  CHECK_FALSE(valid(s.base(), data_offset() - 1));
  s.header()->layout_version = kLayoutVersion + 1;
  CHECK_FALSE(valid(s.base(), s.bytes));
  std::vector<unsigned char> tiny(64);
  CHECK_FALSE(initialize(tiny.data(), tiny.size(), 1));
}

TEST_CASE("the policy seqlock hands out whole copies", "[shm]") {
  Segment s(4096);
  auto got = std::make_unique<PolicyCopy>();
  REQUIRE(read_policy(s.header(), *got));
  CHECK(got->version == 0);  // nothing received yet
  auto p = std::make_unique<PolicyCopy>();
  p->version = 7;
  p->every_n_steps = 3;
  p->operand_mask = 1u << 3;
  std::strcpy(p->layer_regex, "blocks\\.[0-3]\\.");
  p->rule_count = 2;
  std::strcpy(p->rules[1].and_layer_regex, "fc1");
  p->rules[1].range_count = 1;
  write_policy(s.header(), *p);
  REQUIRE(read_policy(s.header(), *got));
  CHECK(got->version == 7);
  CHECK(got->every_n_steps == 3);
  CHECK(got->operand_mask == 8u);
  CHECK(std::string(got->layer_regex) == "blocks\\.[0-3]\\.");
  CHECK(got->rule_count == 2);
  CHECK(std::string(got->rules[1].and_layer_regex) == "fc1");
  // A writer caught mid-update (odd sequence): the reader gives up rather than wait or tear.
  s.header()->policy.seq.fetch_add(1);
  CHECK_FALSE(read_policy(s.header(), *got));
}

TEST_CASE("a policy copy is bounded whatever the writer left in it", "[shm]") {
  Segment s(4096);
  auto p = std::make_unique<PolicyCopy>();
  p->version = 1;
  p->rule_count = 1000;
  std::memset(p->rules[0].layer_regex, 'a', sizeof p->rules[0].layer_regex);
  p->rules[3].range_count = 99;
  std::memcpy(&s.header()->policy.policy, p.get(), sizeof *p);  // as a hostile writer would, unbounded
  auto got = std::make_unique<PolicyCopy>();
  REQUIRE(read_policy(s.header(), *got));
  CHECK(got->rule_count == fp8scope::kMaxSamplingRules);
  CHECK(std::strlen(got->rules[0].layer_regex) == sizeof got->rules[0].layer_regex - 1);
  CHECK(got->rules[3].range_count == fp8scope::kMaxRuleStepRanges);
}

TEST_CASE("drop counters count by reason, and every reason has a metric-safe name", "[shm]") {
  Segment s(4096);
  count_drop(s.header(), DropReason::kRingFull, 3);
  count_drop(s.header(), DropReason::kGraphCapture);
  count_drop(s.header(), static_cast<DropReason>(fp8scope::kClientDropCount));  // out of range: ignored
  CHECK(s.header()->dropped[static_cast<int>(DropReason::kRingFull)] == 3);
  CHECK(s.header()->dropped[static_cast<int>(DropReason::kGraphCapture)] == 1);
  for (const fp8scope::ClientDropTerm& row : fp8scope::kClientDrops) {
    const char* name = row.name;
    INFO(name);
    for (const char* c = name; *c != '\0'; ++c) CHECK(((*c >= 'a' && *c <= 'z') || *c == '_'));
  }
}
