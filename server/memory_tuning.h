// Large sample payloads and 4 MiB chunk messages are allocated and freed continuously. glibc would
// return each freed block to the kernel and take fresh, zeroed pages for the next: page faults and
// zeroing that cost more than the copies themselves. Keeping freed memory in the heap lets them
// be reused; the ingest budget still bounds how much payload memory is live.
#pragma once

namespace fp8scope::server {

void keep_freed_memory();

}  // namespace fp8scope::server
