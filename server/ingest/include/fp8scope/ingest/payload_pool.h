// Memory for sample payloads. A payload's buffer is sized for the whole sample when its first
// chunk arrives, while the byte budget is charged as its bytes arrive (so a client that declares
// much and sends little holds little). That only holds if untouched pages of the buffer are not
// resident, and memory the heap recycles is: a half-received sample in a recycled heap block would
// hold more than the budget says. Payloads of 64 KiB and more are therefore mapped fresh, and when
// freed kept for reuse only up to kCachedBytes in all, counted as long as they are out again. So
// payload memory stays within the budget plus kCachedBytes, under any mix of clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <unordered_set>
#include <utility>

namespace fp8scope::server {

class PayloadPool {
 public:
  static constexpr std::size_t kSmallBytes = 64 << 10;     // below: the heap
  static constexpr std::uint64_t kCachedBytes = 64 << 20;  // recycled mappings, cached or out again

  static PayloadPool& instance();

  void* allocate(std::size_t bytes);
  void deallocate(void* p, std::size_t bytes);
  std::uint64_t recycled_bytes() const;

 private:
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> cached_;  // by mapping size
  std::unordered_set<void*> reused_;          // taken from the cache, still counted in recycled_
  std::uint64_t recycled_ = 0;
};

// A std::allocator that takes large blocks from the PayloadPool and default-initializes (so a
// resize does not zero-fill what the chunks overwrite at once: zeroing 16 MiB costs as much as
// receiving it, and it would make every page resident).
template <class T>
struct PayloadAllocator {
  using value_type = T;
  PayloadAllocator() = default;
  template <class U>
  PayloadAllocator(const PayloadAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < PayloadPool::kSmallBytes) return static_cast<T*>(::operator new(bytes));
    return static_cast<T*>(PayloadPool::instance().allocate(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < PayloadPool::kSmallBytes) {
      ::operator delete(p);
    } else {
      PayloadPool::instance().deallocate(p, bytes);
    }
  }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const PayloadAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace fp8scope::server
