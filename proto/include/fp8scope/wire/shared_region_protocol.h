// Registering shared memory with a daemon on the same host, so a sample's bytes are copied once,
// by the daemon, out of the client's own memory instead of travelling through a socket. On the
// socket the daemon names in Welcome.shared_memory_socket (unix, SOCK_SEQPACKET), the client sends
// one RegionRequest with the file descriptor of a sealed memfd attached (SCM_RIGHTS) and gets one
// RegionReply. The region is the whole file; chunks name ranges of it by byte offset
// (TensorChunk.shared_region/_offset/_bytes). It stays registered while the client keeps this
// connection open. Plain structs and the socket plumbing both ends share; no protobuf.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

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

// The address of the socket at `path`, or nothing when the path does not fit one.
inline std::optional<sockaddr_un> socket_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return std::nullopt;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// One message of `bytes` at `data`, for sendmsg (one descriptor) and recvmsg alike. Received, it
// has room for a few descriptors (the kernel discards any beyond that), and owns every one that
// arrives: attached() hands one out, and closes the rest.
class FdMessage {
 public:
  FdMessage(void* data, std::size_t bytes) : iov_{data, bytes} {
    msg_.msg_iov = &iov_;
    msg_.msg_iovlen = 1;
    msg_.msg_control = control_;
    msg_.msg_controllen = sizeof control_;
  }
  FdMessage(const FdMessage&) = delete;  // msg_ points into this object
  FdMessage& operator=(const FdMessage&) = delete;

  msghdr* get() { return &msg_; }
  // Sending: the descriptor to pass along.
  void attach(int fd) {
    cmsghdr* h = CMSG_FIRSTHDR(&msg_);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(h), &fd, sizeof(int));
    msg_.msg_controllen = CMSG_SPACE(sizeof(int));  // the kernel would read what follows as more headers
  }
  // Received: the one descriptor that came along, or -1 when none or several did (then every one
  // is closed; received() says how many). Call it once for every message received, whatever
  // recvmsg returned: a zero-length message may carry descriptors too.
  int attached() {
    int kept = -1;
    received_ = 0;
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg_); h != nullptr; h = CMSG_NXTHDR(&msg_, h)) {
      if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS || h->cmsg_len < CMSG_LEN(0)) continue;
      const std::size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
        if (++received_ == 1) {
          kept = fd;
        } else {
          close(fd);
        }
      }
    }
    if (received_ > 1 && kept >= 0) {
      close(kept);
      kept = -1;
    }
    return kept;
  }
  int received() const { return received_; }

 private:
  static constexpr std::size_t kMostDescriptors = 8;
  alignas(cmsghdr) char control_[CMSG_SPACE(kMostDescriptors * sizeof(int))] = {};
  int received_ = 0;
  iovec iov_;
  msghdr msg_{};
};

}  // namespace fp8scope::shared_region
