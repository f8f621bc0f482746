// Registering shared memory with a daemon on the same host, so a sample's bytes are copied once,
// by the daemon, out of the client's own memory instead of travelling through a socket. On the
// socket the daemon names in Welcome.shared_memory_socket (unix, SOCK_SEQPACKET), the client sends
// one RegionRequest with the file descriptor of a sealed memfd attached (SCM_RIGHTS) and gets one
// RegionReply. The region is the whole file; chunks name ranges of it by byte offset
// (TensorChunk.shared_region/_offset/_bytes). It stays registered while the client keeps this
// connection open. Plain structs: the hook's side links no protobuf.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8scope::shared_region {

inline constexpr std::uint32_t kMagic = 0x52503846u;  // "F8PR"
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kIdBytes = 16;

struct RegionRequest {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
};

struct RegionReply {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  std::uint32_t ok = 0;                  // 1: registered
  std::uint8_t region_id[kIdBytes] = {};  // what chunks name
  std::uint8_t instance_id[kIdBytes] = {};  // the daemon's, as in its Welcome
  char message[200] = {};                // why not, NUL-terminated
};

}  // namespace fp8scope::shared_region
