// The daemon's heap, tuned for a bound rather than for the last percent of speed: sample payloads
// are mapped by the payload pool, so the heap only holds transient memory, in few arenas.
#pragma once

namespace fp8scope::server {

// Before any thread starts.
void bound_heap_memory();

}  // namespace fp8scope::server
