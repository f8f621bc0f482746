#include "fp8scope/daemon_client/shared_region_client.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace fp8scope {

Result<SharedRegionClient> SharedRegionClient::register_memfd(const std::string& socket_path,
                                                              const std::string& instance_id, int memfd) {
  const std::optional<sockaddr_un> addr = shared_region::socket_address(socket_path);
  if (!addr) return Status::error("the daemon's shared memory socket path does not fit a unix socket address");
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::error(std::string("socket: ") + std::strerror(errno));
  SharedRegionClient link(fd, "");  // closes the socket on every way out
  const timeval two_seconds{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &two_seconds, sizeof two_seconds);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &two_seconds, sizeof two_seconds);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0) {
    return Status::error("cannot reach " + socket_path + ": " + std::strerror(errno) +
                         " (the daemon runs on another host or in another container?)");
  }
  shared_region::RegionRequest request;
  shared_region::FdMessage msg(&request, sizeof request);
  msg.attach(memfd);
  if (sendmsg(fd, msg.get(), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof request)) {
    return Status::error(std::string("cannot send the region to ") + socket_path + ": " + std::strerror(errno));
  }
  shared_region::RegionReply reply;
  const ssize_t n = recv(fd, &reply, sizeof reply, 0);
  if (n != static_cast<ssize_t>(sizeof reply) || reply.magic != shared_region::kMagic ||
      reply.version != shared_region::kVersion) {
    return Status::error("no registration answer from " + socket_path);
  }
  if (std::string(reinterpret_cast<const char*>(reply.instance_id), sizeof reply.instance_id) != instance_id) {
    return Status::error(socket_path + " belongs to another daemon than the one this stream reached");
  }
  reply.message[sizeof reply.message - 1] = '\0';
  if (reply.ok != 1) return Status::error(std::string("the daemon refused the region: ") + reply.message);
  link.region_id_.assign(reinterpret_cast<const char*>(reply.region_id), sizeof reply.region_id);
  return link;
}

SharedRegionClient::SharedRegionClient(SharedRegionClient&& other) noexcept
    : socket_(std::exchange(other.socket_, -1)), region_id_(std::move(other.region_id_)) {}

SharedRegionClient& SharedRegionClient::operator=(SharedRegionClient&& other) noexcept {
  if (this != &other) {
    if (socket_ >= 0) close(socket_);
    socket_ = std::exchange(other.socket_, -1);
    region_id_ = std::move(other.region_id_);
  }
  return *this;
}

SharedRegionClient::~SharedRegionClient() {
  if (socket_ >= 0) close(socket_);
}

}  // namespace fp8scope
