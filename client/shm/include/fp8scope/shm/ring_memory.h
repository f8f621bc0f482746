// The memory of a fresh ring memfd as the hook maps it: shared, read-write, populated once, and on
// huge pages where the host gives shared memory huge pages on request
// (/sys/kernel/mm/transparent_hugepage/shmem_enabled advise, within_size or always). A daemon on the
// same host copies samples out of the ring with pread, never mapping it (server/ingest/
// shared_regions.h); with 4 KiB pages a third of pread's time is per-page kernel work, with 2 MiB
// pages it runs at about 0.9 of memcpy (README, Performance).
#pragma once

#include <sys/mman.h>

#include <cstddef>

namespace fp8scope::shm {

// MAP_FAILED when the memfd cannot be mapped. Its `bytes` must be freshly created (zero): where
// the kernel lacks MADV_POPULATE_WRITE (before Linux 5.14) each page is written with a zero.
inline void* map_fresh_ring(int fd, std::size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return base;
  // Before the pages exist: the page size is chosen when a page is first faulted in. Refused
  // where the host does not allow it, which leaves 4 KiB pages.
  (void)madvise(base, bytes, MADV_HUGEPAGE);
  // Populated now, for writing: otherwise the first pass through the ring takes a page fault every
  // few records on the training thread.
  if (madvise(base, bytes, MADV_POPULATE_WRITE) != 0) {
    for (std::size_t at = 0; at < bytes; at += 4096) static_cast<volatile unsigned char*>(base)[at] = 0;
  }
  return base;
}

}  // namespace fp8scope::shm
