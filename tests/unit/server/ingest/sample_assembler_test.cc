// Reassembling samples from chunks: in order, under the byte budget, and every way a client can
// get it wrong is refused with its reason while the stream carries on.
#include "fp8scope/ingest/sample_assembler.h"

#include <catch2/catch.hpp>

#include "fp8scope/wire/wire.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {

v1::TensorHeader header(std::int64_t rows, std::int64_t cols, v1::DType dtype = v1::DTYPE_F32) {
  v1::TensorHeader h;
  h.set_step(3);
  h.set_layer("blocks.0.mlp.fc1");
  h.set_gemm(v1::GEMM_FPROP);
  h.set_operand(v1::OPERAND_X);
  h.set_dtype(dtype);
  h.add_shape(rows);
  h.add_shape(cols);
  h.set_payload_bytes(static_cast<std::uint64_t>(rows * cols * dtype_bytes(*wire::from_wire(dtype))));
  return h;
}

v1::TensorChunk chunk(std::uint64_t id, std::uint64_t offset, std::size_t bytes, bool last,
                      const v1::TensorHeader* h = nullptr) {
  v1::TensorChunk c;
  c.set_sample_id(id);
  if (h != nullptr) *c.mutable_header() = *h;
  c.set_offset(offset);
  c.set_data(std::string(bytes, '\x01'));
  c.set_last(last);
  return c;
}

struct Fixture {
  ByteBudget budget{1 << 20};
  SampleAssembler assembler{std::make_shared<ClientInfo>(), AssemblerLimits{1 << 20, 1024}, &budget};
};

}  // namespace

TEST_CASE("a sample in three chunks completes and holds its bytes until released", "[assembler]") {
  Fixture f;
  const v1::TensorHeader h = header(4, 64);  // 1024 bytes
  CHECK(f.assembler.add(chunk(1, 0, 400, false, &h)).empty());
  CHECK(f.budget.used() == 400);  // what arrived, not what the header declares
  CHECK(f.assembler.add(chunk(1, 400, 400, false)).empty());
  CHECK(f.budget.used() == 800);
  auto events = f.assembler.add(chunk(1, 800, 224, true));
  REQUIRE(events.size() == 1);
  REQUIRE(events[0].kind == AssemblerEvent::Kind::kComplete);
  REQUIRE(events[0].sample);
  CHECK(events[0].sample->header.rows == 4);
  CHECK(events[0].sample->header.cols == 64);
  CHECK(events[0].sample->payload.size() == 1024);
  events[0].sample->lease.reset();
  CHECK(f.budget.used() == 0);
}

TEST_CASE("each malformed sample is refused with a reason and the next one still works", "[assembler]") {
  Fixture f;
  const v1::TensorHeader good = header(2, 8);  // 64 bytes
  auto refused = [&](std::vector<AssemblerEvent> events) {
    REQUIRE(events.size() == 1);
    CHECK(events[0].kind == AssemblerEvent::Kind::kRejected);
    return events[0].refusal.reason;
  };
  v1::TensorHeader bad = good;
  bad.set_payload_bytes(63);
  CHECK(refused(f.assembler.add(chunk(1, 0, 63, true, &bad))) == "size_mismatch");
  bad = good;
  bad.set_dtype(static_cast<v1::DType>(99));
  CHECK(refused(f.assembler.add(chunk(2, 0, 64, true, &bad))) == "bad_dtype");
  bad = good;
  bad.set_shape(0, -4);
  CHECK(refused(f.assembler.add(chunk(3, 0, 64, true, &bad))) == "bad_shape");
  bad = good;
  bad.clear_shape();
  for (int i = 0; i < 9; ++i) bad.add_shape(1);
  CHECK(refused(f.assembler.add(chunk(4, 0, 64, true, &bad))) == "bad_shape");
  bad = good;
  bad.set_layer(std::string(300, 'a'));
  CHECK(refused(f.assembler.add(chunk(5, 0, 64, true, &bad))) == "bad_layer");
  bad = good;
  bad.set_operand(v1::OPERAND_UNSPECIFIED);
  CHECK(refused(f.assembler.add(chunk(6, 0, 64, true, &bad))) == "bad_operand");
  CHECK(refused(f.assembler.add(chunk(7, 0, 64, true))) == "gap");  // no header
  CHECK(f.assembler.add(chunk(8, 0, 32, false, &good)).empty());
  CHECK(refused(f.assembler.add(chunk(8, 40, 24, true))) == "gap");  // a hole at 32..40
  CHECK(f.assembler.add(chunk(8, 64, 10, true)).empty());           // the rest of a refused sample is skipped
  CHECK(refused(f.assembler.add(chunk(9, 0, 2000, true, &good))) == "chunk_too_large");
  CHECK(f.assembler.add(chunk(9, 0, 64, true, &good)).empty());  // skipped: same id as the refused one
  CHECK(refused(f.assembler.add(chunk(5, 0, 64, true, &good))) == "bad_sample_id");
  CHECK(f.budget.used() == 0);  // every refusal gave its reservation back
  auto ok = f.assembler.add(chunk(10, 0, 64, true, &good));
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].kind == AssemblerEvent::Kind::kComplete);
}

TEST_CASE("a sample interrupted by the next one is refused, and the next one proceeds", "[assembler]") {
  Fixture f;
  const v1::TensorHeader h = header(2, 8);
  CHECK(f.assembler.add(chunk(1, 0, 32, false, &h)).empty());
  auto events = f.assembler.add(chunk(2, 0, 64, true, &h));
  REQUIRE(events.size() == 2);
  CHECK(events[0].sample_id == 1);
  CHECK(events[0].refusal.reason == "gap");
  CHECK(events[1].sample_id == 2);
  CHECK(events[1].kind == AssemblerEvent::Kind::kComplete);
}

TEST_CASE("a full budget drops the sample (not an error) and the stream goes on", "[assembler]") {
  ByteBudget budget(100);
  SampleAssembler a(std::make_shared<ClientInfo>(), AssemblerLimits{1 << 20, 1024}, &budget);
  const v1::TensorHeader h = header(2, 8);  // 64 bytes
  auto first = a.add(chunk(1, 0, 64, true, &h));
  REQUIRE(first[0].kind == AssemblerEvent::Kind::kComplete);  // holds 64 of 100
  auto second = a.add(chunk(2, 0, 64, true, &h));
  REQUIRE(second.size() == 1);
  CHECK(second[0].kind == AssemblerEvent::Kind::kDropped);
  CHECK(second[0].refusal.reason == "queue_full");
  first[0].sample.reset();
  CHECK(a.add(chunk(3, 0, 64, true, &h))[0].kind == AssemblerEvent::Kind::kComplete);
}

TEST_CASE("a stream that declares a huge sample and stalls holds only what it sent", "[assembler]") {
  ByteBudget budget(1 << 20);
  SampleAssembler stalled(std::make_shared<ClientInfo>(), AssemblerLimits{1 << 20, 1024}, &budget);
  SampleAssembler good(std::make_shared<ClientInfo>(), AssemblerLimits{1 << 20, 1024}, &budget);
  const v1::TensorHeader huge = header(1024, 256);  // the whole budget: 1 MiB of f32
  CHECK(stalled.add(chunk(1, 0, 1024, false, &huge)).empty());
  CHECK(budget.used() == 1024);
  const v1::TensorHeader h = header(64, 64);  // 16 KiB
  for (std::uint64_t id = 1; id <= 16; ++id) {
    std::vector<AssemblerEvent> events;
    for (std::uint64_t offset = 0; offset < 16384; offset += 1024) {
      events = good.add(chunk(id, offset, 1024, offset + 1024 == 16384, offset == 0 ? &h : nullptr));
    }
    REQUIRE(events.size() == 1);
    CHECK(events[0].kind == AssemblerEvent::Kind::kComplete);
  }
}

TEST_CASE("a sample larger than the daemon's limit is refused before anything is allocated", "[assembler]") {
  Fixture f;
  const v1::TensorHeader h = header(1 << 20, 1 << 10);  // 4 GiB of f32
  auto events = f.assembler.add(chunk(1, 0, 16, false, &h));
  REQUIRE(events.size() == 1);
  CHECK(events[0].refusal.reason == "too_large");
  CHECK(f.budget.used() == 0);
}

TEST_CASE("a stream that ends mid-sample gives the bytes back", "[assembler]") {
  Fixture f;
  const v1::TensorHeader h = header(2, 8);
  CHECK(f.assembler.add(chunk(7, 0, 32, false, &h)).empty());
  CHECK(f.assembler.abandon() == 7u);
  CHECK(f.budget.used() == 0);
  CHECK(!f.assembler.abandon());
}

TEST_CASE("bytes found in shared memory complete a sample in one chunk past the chunk limit, and an unreadable "
          "range refuses it",
          "[assembler]") {
  Fixture f;  // chunks of at most 1024 bytes
  const v1::TensorHeader h = header(16, 64);  // 4096 bytes
  std::vector<std::uint8_t> shared(4096);
  for (std::size_t i = 0; i < shared.size(); ++i) shared[i] = static_cast<std::uint8_t>(i * 7);
  // The caller reads the client's memory into the payload; here, from a vector.
  const auto in_shared_memory = [&](Status read) {
    ChunkBytes b;
    b.shared = true;
    b.shared_size = shared.size();
    b.read_shared = [&shared, read](std::uint8_t* into) {
      if (read.ok()) std::copy(shared.begin(), shared.end(), into);
      return read;
    };
    return b;
  };
  v1::TensorChunk reference = chunk(1, 0, 0, true, &h);
  auto events = f.assembler.add(reference, in_shared_memory(Status()));
  REQUIRE(events.size() == 1);
  REQUIRE(events[0].kind == AssemblerEvent::Kind::kComplete);
  CHECK(std::equal(shared.begin(), shared.end(), events[0].sample->payload.begin()));
  CHECK(f.budget.used() == 4096);
  events[0].sample->lease.reset();

  // The same bytes carried in the chunk itself are bound by the limit.
  v1::TensorChunk carried = chunk(2, 0, 0, true, &h);
  ChunkBytes carried_bytes;
  carried_bytes.bytes = shared;
  events = f.assembler.add(carried, carried_bytes);
  REQUIRE(events.size() == 1);
  CHECK(events[0].refusal.reason == "chunk_too_large");

  v1::TensorChunk unreadable = chunk(3, 0, 0, true, &h);
  ChunkBytes past_end;
  past_end.shared = true;
  past_end.unreadable = Refusal{"bad_region", "a chunk names bytes past its region"};
  events = f.assembler.add(unreadable, past_end);
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind == AssemblerEvent::Kind::kRejected);
  CHECK(events[0].refusal.reason == "bad_region");
  CHECK(f.budget.used() == 0);

  // A read that fails part way (a client's file cut short) refuses the sample and keeps nothing.
  v1::TensorChunk cut = chunk(4, 0, 0, true, &h);
  events = f.assembler.add(cut, in_shared_memory(Status::error("the region ended after 2048 bytes")));
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind == AssemblerEvent::Kind::kRejected);
  CHECK(events[0].refusal.reason == "bad_region");
  CHECK_THAT(events[0].refusal.message, Catch::Contains("could not be read: the region ended after 2048 bytes"));
  CHECK(f.budget.used() == 0);
}
