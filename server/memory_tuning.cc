#include "memory_tuning.h"

#include <malloc.h>

namespace fp8scope::server {

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);  // blocks below 256 MiB come from the heap...
  mallopt(M_TRIM_THRESHOLD, 1 << 30);    // ...and up to 1 GiB of freed heap is kept for reuse
}

}  // namespace fp8scope::server
