#include "fp8scope/ingest/payload_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <iterator>
#include <vector>

namespace fp8scope::server {
namespace {

// Sizes round up to a power of two so freed buffers fit later samples of a similar size; the
// rounding costs address space, not memory (pages past the payload are never touched).
std::size_t mapping_size(std::size_t bytes) {
  std::size_t size = PayloadPool::kSmallBytes;
  while (size < bytes) size *= 2;
  return size;
}

}  // namespace

PayloadPool& PayloadPool::instance() {
  static PayloadPool* pool = new PayloadPool;  // never destroyed: payloads may outlive static destruction
  return *pool;
}

void* PayloadPool::allocate(std::size_t bytes) {
  const std::size_t size = mapping_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The most recently freed of this size: its pages are the likeliest still in cache.
    if (const auto [first, last] = cached_.equal_range(size); first != last) {
      const auto it = std::prev(last);
      void* p = it->second;
      cached_.erase(it);
      reused_.insert(p);
      return p;
    }
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void PayloadPool::deallocate(void* p, std::size_t bytes) {
  const std::size_t size = mapping_size(bytes);
  std::vector<std::pair<std::size_t, void*>> unmap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reused_.erase(p) > 0) {  // already counted
      cached_.emplace(size, p);
      return;
    }
    // The sizes seen last are the ones worth keeping: older ones make room.
    while (size <= kCachedBytes && recycled_ + size > kCachedBytes && !cached_.empty()) {
      const auto victim = std::prev(cached_.end());
      unmap.push_back(*victim);
      recycled_ -= victim->first;
      cached_.erase(victim);
    }
    if (recycled_ + size <= kCachedBytes) {
      recycled_ += size;
      cached_.emplace(size, p);
    } else {
      unmap.emplace_back(size, p);
    }
  }
  for (const auto& [n, q] : unmap) munmap(q, n);
}

std::uint64_t PayloadPool::recycled_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recycled_;
}

}  // namespace fp8scope::server
