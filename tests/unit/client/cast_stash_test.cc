// The cast stash: a TE cast's input waits there for the GEMM that reads its output, found by the
// output's device pointers (row-wise or column-wise); a newer cast of the same output supersedes
// it; casts two steps old expire; room is made from the oldest, never from one a record is still
// copying out. The CUDA driver fixture's device memory is host memory, so the copies are checked
// by reading it.
#include "fp8scope/hook/cast_stash.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

using namespace fp8scope::hook;

namespace {

struct Context {
  Context() {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    cuInit(0);
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
  }
};

// Stashes `bytes` of `fill` as a cast of `rowwise` (and `columnwise`) at `step`.
bool stash(CastStash& s, const void* rowwise, const void* columnwise, std::uint64_t step, std::uint64_t bytes, char fill) {
  StashedCast c;
  c.rowwise = rowwise;
  c.columnwise = columnwise;
  c.step = step;
  c.record.bytes = bytes;
  std::vector<char> source(bytes, fill);
  const std::optional<CUdeviceptr> at = s.reserve(bytes, nullptr, c.begin, c.end);
  if (!at) return false;
  c.at = *at;
  cuMemcpyDtoDAsync(c.at, reinterpret_cast<CUdeviceptr>(source.data()), bytes, nullptr);
  return s.add(c, nullptr);
}

}  // namespace

TEST_CASE("a GEMM operand finds the cast that wrote it, row-wise or column-wise, and the newest one", "[hook]") {
  Context context;
  CastStash s(driver_api(), 4 * CastStash::kAlign);
  int x_rows = 0, x_cols = 0, w = 0;
  REQUIRE(stash(s, &x_rows, &x_cols, 1, 100, 'a'));
  REQUIRE(stash(s, &w, nullptr, 1, 100, 'b'));
  bool columnwise = true;
  const StashedCast* found = s.find(&x_rows, columnwise);
  REQUIRE(found != nullptr);
  CHECK_FALSE(columnwise);
  CHECK(*reinterpret_cast<const char*>(found->at) == 'a');
  found = s.find(&x_cols, columnwise);
  REQUIRE(found != nullptr);
  CHECK(columnwise);
  CHECK(s.find(&context, columnwise) == nullptr);
  // A later cast into the same buffer: the codes are its, so only it is found.
  REQUIRE(stash(s, &x_rows, &x_cols, 1, 100, 'c'));
  CHECK(*reinterpret_cast<const char*>(s.find(&x_cols, columnwise)->at) == 'c');
  // Two steps on, the step's casts are gone; the last step's may still be read.
  s.step(2);
  CHECK(s.find(&w, columnwise) != nullptr);
  s.step(3);
  CHECK(s.find(&w, columnwise) == nullptr);
  CHECK(s.find(&x_rows, columnwise) == nullptr);
}

TEST_CASE("room is made from the oldest cast, never from one a record still copies out", "[hook]") {
  Context context;
  CastStash s(driver_api(), 4 * CastStash::kAlign);
  int a = 0, b = 0, c = 0, d = 0, e = 0;
  REQUIRE(stash(s, &a, nullptr, 1, CastStash::kAlign, 'a'));
  REQUIRE(stash(s, &b, nullptr, 1, CastStash::kAlign, 'b'));
  REQUIRE(stash(s, &c, nullptr, 1, 2 * CastStash::kAlign, 'c'));
  bool columnwise = false;
  const std::uint64_t held = s.find(&a, columnwise)->id;
  s.hold(held);  // a record is copying a's part out
  CHECK_FALSE(stash(s, &d, nullptr, 1, CastStash::kAlign, 'd'));  // the ring is full, and a is read
  s.release(held);
  REQUIRE(stash(s, &d, nullptr, 1, CastStash::kAlign, 'd'));  // a made room
  CHECK(s.find(&a, columnwise) == nullptr);
  CHECK(s.find(&b, columnwise) != nullptr);
  // A part larger than the ring never fits.
  CHECK_FALSE(stash(s, &e, nullptr, 1, 5 * CastStash::kAlign, 'e'));
}
