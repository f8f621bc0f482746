#include "fp8scope/ingest/shared_regions.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace fp8scope::server {
namespace {

constexpr auto kRegisterWithin = std::chrono::seconds(5);

std::string errno_text() { return std::strerror(errno); }

std::string id_key(const RegionId& id) { return std::string(reinterpret_cast<const char*>(id.data()), id.size()); }

RegionId random_id() {
  std::random_device device;  // the kernel's entropy: ids are capabilities
  RegionId id;
  for (std::size_t i = 0; i < id.size(); i += 4) {
    const std::uint32_t r = device();
    std::memcpy(id.data() + i, &r, 4);
  }
  return id;
}

}  // namespace

struct SharedRegions::Connection {
  int fd = -1;
  uid_t uid = 0;
  std::chrono::steady_clock::time_point since;
  std::optional<std::string> region;  // its id, once registered
};

Result<std::unique_ptr<SharedRegions>> SharedRegions::open(const std::string& path, SharedRegionLimits limits) {
  std::optional<sockaddr_un> addr = shared_region::socket_address(path);
  if (!addr) {
    return Status::error("shared memory socket: expected a path of 1.." + std::to_string(sizeof addr->sun_path - 1) +
                         " bytes, got " + std::to_string(path.size()));
  }
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::error("shared memory socket: " + errno_text());
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());  // a previous daemon's
  if (bind(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof *addr) != 0 || listen(fd, 64) != 0) {
    const std::string why = errno_text();
    close(fd);
    return Status::error("shared memory socket " + path + ": " + why);
  }
  // Any local user may offer memory: a region is only a capability to read what its owner shares.
  chmod(path.c_str(), 0666);
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(fd);
    unlink(path.c_str());
    return Status::error("shared memory socket: eventfd: " + errno_text());
  }
  return std::unique_ptr<SharedRegions>(new SharedRegions(path, fd, wake, limits));
}

SharedRegions::SharedRegions(std::string path, int listener, int wake, SharedRegionLimits limits)
    : path_(std::move(path)), listener_(listener), wake_(wake), instance_(random_id()), limits_(limits) {
  spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  thread_ = std::thread([this] { serve(); });
}

SharedRegions::~SharedRegions() {
  stop_ = true;
  const std::uint64_t one = 1;
  (void)!write(wake_, &one, sizeof one);
  thread_.join();
  close(listener_);
  close(wake_);
  if (spare_ >= 0) close(spare_);
  unlink(path_.c_str());
}

Status SharedRegions::View::read(std::uint8_t* into) const {
  for (std::uint64_t done = 0; done < bytes;) {
    const ssize_t n = pread(*file, into + done, static_cast<std::size_t>(bytes - done), static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::error(n < 0 ? errno_text() : "the region ended after " + std::to_string(offset + done) + " bytes");
    }
    done += static_cast<std::uint64_t>(n);
  }
  return Status();
}

std::string SharedRegions::instance_id() const { return id_key(instance_); }

std::size_t SharedRegions::regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

Result<SharedRegions::View> SharedRegions::view(const std::string& id, std::uint64_t offset, std::uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = regions_.find(id);
  if (it == regions_.end()) {
    return Status::error("names a shared memory region this daemon does not have (never registered, or its client "
                         "closed the registration)");
  }
  const Region& r = it->second;
  if (offset > r.bytes || bytes > r.bytes - offset) {
    return Status::error("names bytes " + std::to_string(offset) + "+" + std::to_string(bytes) +
                         " of a shared memory region of " + std::to_string(r.bytes) + " bytes");
  }
  // Bytes the client never wrote are a hole in its memfd, and tmpfs fills a hole the daemon reads
  // with new pages: memory neither the client's pages nor the daemon's budget account for.
  const off_t hole = bytes == 0 ? 0 : lseek(*r.file, static_cast<off_t>(offset), SEEK_HOLE);
  if (hole < 0 || static_cast<std::uint64_t>(hole) - offset < bytes) {
    return Status::error("names bytes " + std::to_string(offset) + "+" + std::to_string(bytes) +
                         " of a shared memory region that were never written (a hole in its memfd)");
  }
  return View{r.file, offset, bytes};
}

Result<SharedRegions::Region> SharedRegions::open_region(int fd) const {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    return Status::error("expected a memfd (tmpfs, not hugetlbfs), got another kind of file");
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return Status::error("expected a memfd sealed against shrinking (F_SEAL_SHRINK), got one that may shrink");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      static_cast<std::uint64_t>(st.st_size) > limits_.max_region_bytes) {
    return Status::error("expected a memfd of 1.." + std::to_string(limits_.max_region_bytes) + " bytes, got " +
                         std::to_string(st.st_size));
  }
  // A file description of the daemon's own, whose offset SEEK_HOLE may move (the client's is shared
  // with the descriptor it sent).
  const int file = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (file < 0) return Status::error("cannot open it: " + errno_text());
  Region r;
  r.file = std::shared_ptr<const int>(new int(file), [](const int* f) {
    close(*f);
    delete f;
  });
  r.bytes = static_cast<std::uint64_t>(st.st_size);
  return r;
}

void SharedRegions::reply(int fd, const RegionId* id, const std::string& message) const {
  shared_region::RegionReply r;
  r.ok = id != nullptr ? 1 : 0;
  if (id != nullptr) std::memcpy(r.region_id, id->data(), id->size());
  std::memcpy(r.instance_id, instance_.data(), instance_.size());
  std::snprintf(r.message, sizeof r.message, "%s", message.c_str());
  (void)!send(fd, &r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void SharedRegions::on_message(Connection& c) {
  shared_region::RegionRequest request;
  shared_region::FdMessage msg(&request, sizeof request);
  const ssize_t n = recvmsg(c.fd, msg.get(), MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  const int region_fd = n >= 0 ? msg.attached() : -1;  // owned, whatever the message held
  if (n <= 0) {
    if (region_fd >= 0) close(region_fd);
    return;
  }
  std::string refusal;
  if (c.region) {
    refusal = "this connection already registered a region";
  } else if (n != static_cast<ssize_t>(sizeof request) || (msg.get()->msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
             request.magic != shared_region::kMagic || request.version != shared_region::kVersion) {
    refusal = "expected a RegionRequest of version " + std::to_string(shared_region::kVersion);
  } else if (region_fd < 0) {
    refusal = "expected one file descriptor attached (SCM_RIGHTS), got " + std::to_string(msg.received());
  }
  Result<Region> region = Status::error(refusal);
  if (refusal.empty()) region = open_region(region_fd);
  if (region_fd >= 0) close(region_fd);  // the region keeps a file description of its own
  if (!region.ok()) {
    spdlog::warn("shared memory registration from uid {} refused: {}", c.uid, region.message());
    reply(c.fd, nullptr, region.message());
    return;
  }
  const RegionId id = random_id();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto mine = per_user_.find(c.uid);
    const std::size_t held = mine == per_user_.end() ? 0 : mine->second;
    if (regions_.size() >= limits_.max_regions || held >= limits_.max_regions_per_user) {
      reply(c.fd, nullptr, "this daemon holds as many shared memory regions as it allows (" +
                               std::to_string(limits_.max_regions) + ", " +
                               std::to_string(limits_.max_regions_per_user) + " per user)");
      return;
    }
    regions_.emplace(id_key(id), std::move(region).value());
    ++per_user_[c.uid];
  }
  c.region = id_key(id);
  reply(c.fd, &id, "");
}

void SharedRegions::refuse_one() {
  // The pending connection stays queued, and the listener readable, until it is taken: take it
  // with the descriptor held in reserve for this, close it, and hold another.
  if (spare_ >= 0) close(spare_);
  const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) close(fd);
  spare_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto now = std::chrono::steady_clock::now();
  ++refused_;
  if (now - last_refusal_log_ >= std::chrono::seconds(10)) {
    last_refusal_log_ = now;
    spdlog::warn("shared memory socket: out of file descriptors; refused {} connection(s) so far (those clients "
                 "stream their bytes instead; raise the descriptor limit, LimitNOFILE in the systemd unit)",
                 refused_);
  }
  if (spare_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // none to reserve: do not spin
}

void SharedRegions::serve() {
  std::vector<Connection> connections;
  const auto drop = [&](std::size_t i) {
    Connection& c = connections[i];
    if (c.region) {
      std::lock_guard<std::mutex> lock(mu_);
      regions_.erase(*c.region);
      if (--per_user_[c.uid] == 0) per_user_.erase(c.uid);
    }
    close(c.fd);
    connections.erase(connections.begin() + static_cast<std::ptrdiff_t>(i));
  };
  while (!stop_) {
    std::vector<pollfd> fds = {{wake_, POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const Connection& c : connections) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) break;
    for (std::size_t i = connections.size(); i-- > 0;) {
      const short ev = fds[i + 2].revents;
      if ((ev & POLLIN) != 0) on_message(connections[i]);
      const bool stale = !connections[i].region && std::chrono::steady_clock::now() - connections[i].since > kRegisterWithin;
      if ((ev & (POLLHUP | POLLERR | POLLNVAL)) != 0 || stale) drop(i);
    }
    if ((fds[1].revents & POLLIN) != 0) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        refuse_one();
      } else if (fd >= 0 && connections.size() >= limits_.max_regions) {
        close(fd);  // full: the client streams its bytes instead
      } else if (fd >= 0) {
        ucred cred{};
        socklen_t len = sizeof cred;
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
        connections.push_back({fd, cred.uid, std::chrono::steady_clock::now(), std::nullopt});
      }
    }
  }
  while (!connections.empty()) drop(connections.size() - 1);
}

}  // namespace fp8scope::server
