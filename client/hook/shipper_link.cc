#include "fp8scope/hook/shipper_link.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fp8scope/shm/ring_memory.h"

extern char** environ;

namespace fp8scope::hook {
namespace {

constexpr int kShipperFd = 3;  // where the shipper finds the segment
constexpr std::chrono::seconds kFirstBackoff{1}, kMaxBackoff{30}, kLongLived{60};

bool executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

// The shipper's environment: ours, without LD_PRELOAD (it needs no hook), plus where the segment is
// and whom to watch.
std::vector<std::string> shipper_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 || std::strncmp(*e, "FP8SCOPE_SHM_FD=", 16) == 0 ||
        std::strncmp(*e, "FP8SCOPE_PARENT_PID=", 20) == 0) {
      continue;
    }
    env.emplace_back(*e);
  }
  env.push_back(std::string(shm::kShmFdEnv) + "=" + std::to_string(kShipperFd));
  env.push_back("FP8SCOPE_PARENT_PID=" + std::to_string(getpid()));
  return env;
}

}  // namespace

std::string find_shipper() {
  if (const char* path = std::getenv("FP8SCOPE_SHIPPER"); path != nullptr && *path != '\0') return path;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&find_shipper), &info) != 0 && info.dli_fname != nullptr) {
    std::string dir(info.dli_fname);
    dir.resize(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
    if (const std::string installed = dir + "/../../bin/fp8scope-shipper"; executable(installed)) return installed;
  }
#if defined(FP8SCOPE_SHIPPER_BUILD_PATH)
  if (executable(FP8SCOPE_SHIPPER_BUILD_PATH)) return FP8SCOPE_SHIPPER_BUILD_PATH;
#endif
  return {};
}

ShipperLink::ShipperLink(std::uint64_t ring_bytes, std::string shipper_path) : shipper_path_(std::move(shipper_path)) {
  bytes_ = shm::data_offset() + ring_bytes;
  fd_ = memfd_create("fp8scope-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) {
    std::fprintf(stderr, "fp8scope hook: cannot create the shared ring (%s); sampling is off\n", std::strerror(errno));
    return;
  }
  // Its size fixed for good: a daemon on this host may then map it and copy samples straight out
  // of it (a segment that could shrink under a reader would fault it). Unsealed, the shipper
  // streams the bytes instead.
  (void)fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // Populated once, on huge pages where the host allows them (shm/ring_memory.h).
  void* base = shm::map_fresh_ring(fd_, bytes_);
  if (base == MAP_FAILED || !shm::initialize(base, bytes_, static_cast<std::uint32_t>(getpid()))) {
    std::fprintf(stderr, "fp8scope hook: cannot map the shared ring (%s); sampling is off\n", std::strerror(errno));
    return;
  }
  segment_ = static_cast<shm::Header*>(base);
  if (shipper_path_.empty()) {
    std::fprintf(stderr, "fp8scope hook: fp8scope-shipper not found (set FP8SCOPE_SHIPPER); samples are dropped and "
                         "counted\n");
    return;
  }
  spawn();
}

void ShipperLink::spawn() {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd_, kShipperFd);
  const std::vector<std::string> env = shipper_environment();
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(shipper_path_.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, shipper_path_.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  pid_ = rc == 0 ? pid : -1;
  spawned_at_ = std::chrono::steady_clock::now();
  if (pid_ < 0) shipper_gone();
}

void ShipperLink::shipper_gone() {
  const auto now = std::chrono::steady_clock::now();
  if (now - spawned_at_ >= kLongLived) backoff_ = kFirstBackoff;
  next_spawn_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
}

void ShipperLink::keep_alive() {
  if (segment_ == nullptr || shipper_path_.empty()) return;
  if (pid_ > 0) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == 0) return;  // running
    pid_ = -1;           // exited, or reaped by someone else (ECHILD)
    segment_->shipper_connected.store(0, std::memory_order_relaxed);
    shipper_gone();
  }
  if (std::chrono::steady_clock::now() >= next_spawn_) spawn();
}

}  // namespace fp8scope::hook
