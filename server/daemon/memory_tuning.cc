#include "fp8scope/daemon/memory_tuning.h"

#include <malloc.h>

namespace fp8scope::server {

void bound_heap_memory() {
  // Freed blocks stay in the heap for reuse (4 MiB chunk copies come and go with every message:
  // returning them to the kernel costs page faults and zeroing that outweigh the copies)...
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  // ...in few arenas: glibc gives every busy thread an arena of its own that keeps what it freed,
  // so with many streams the heap held several times what was ever in use at once.
  mallopt(M_ARENA_MAX, 2);
}

}  // namespace fp8scope::server
