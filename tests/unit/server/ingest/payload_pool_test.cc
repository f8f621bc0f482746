// Payload memory: a buffer is resident only where its chunks were written, freed buffers are
// reused, and what is kept for reuse stays within the pool's fixed cap however many are freed.
#include "fp8scope/ingest/payload_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "fp8scope/ingest/sample.h"

using namespace fp8scope::server;

namespace {
std::size_t resident_bytes(const void* p, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> pages((bytes + page - 1) / page);
  REQUIRE(mincore(const_cast<void*>(p), bytes, pages.data()) == 0);
  std::size_t n = 0;
  for (unsigned char in : pages) n += in & 1;
  return n * page;
}
}  // namespace

TEST_CASE("a payload sized for a whole sample is resident only where its chunks were written", "[payload_pool]") {
  Payload payload;
  payload.resize(32 << 20);  // the sample's declared size, as the assembler does on its header
  std::memset(payload.data(), 1, 1 << 20);  // the first chunk
  // A huge page may back the first chunk's neighbourhood; nothing near the rest of the sample.
  CHECK(resident_bytes(payload.data(), payload.size()) <= (1 << 20) + (2 << 20));
}

TEST_CASE("freed payload buffers are reused, and what is kept stays within the cap", "[payload_pool]") {
  PayloadPool& pool = PayloadPool::instance();
  void* first = pool.allocate(3 << 20);
  pool.deallocate(first, 3 << 20);
  void* again = pool.allocate(3 << 20);  // the same size class: the same buffer
  CHECK(again == first);
  pool.deallocate(again, 3 << 20);

  std::vector<void*> many;
  for (int i = 0; i < 64; ++i) many.push_back(pool.allocate(8 << 20));
  for (void* p : many) pool.deallocate(p, 8 << 20);
  CHECK(pool.recycled_bytes() <= PayloadPool::kCachedBytes);
  void* big = pool.allocate(PayloadPool::kCachedBytes * 2);  // larger than the cap: never kept
  pool.deallocate(big, PayloadPool::kCachedBytes * 2);
  CHECK(pool.recycled_bytes() <= PayloadPool::kCachedBytes);
}
