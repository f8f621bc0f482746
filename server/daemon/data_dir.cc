#include "fp8scope/daemon/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace fp8scope::server {
namespace {

// "owned by uid 0, gid 0, mode 0755" of the directory itself, or of its nearest existing parent.
std::string describe(const std::filesystem::path& dir) {
  std::filesystem::path at = dir;
  struct stat st {};
  while (::stat(at.c_str(), &st) != 0 && at.has_parent_path() && at != at.parent_path()) at = at.parent_path();
  std::ostringstream out;
  out << (at != dir ? "its parent " + at.string() : std::string("it")) << " is owned by uid " << st.st_uid << ", gid "
      << st.st_gid << ", mode " << std::oct << std::showbase << (st.st_mode & 07777);
  return out.str();
}

Status not_writable(const std::string& dir, const std::string& what, const std::string& why) {
  std::ostringstream out;
  out << "--data-dir " << dir << ": uid " << ::geteuid() << " (gid " << ::getegid() << ") cannot " << what << " (" << why
      << "); " << describe(dir) << ". Give that user the directory (chown " << ::geteuid() << ":" << ::getegid() << " "
      << dir << "), or point --data-dir at one it owns";
  return Status::error(out.str());
}

}  // namespace

Status prepare_data_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec == std::errc::permission_denied || ec == std::errc::read_only_file_system) {
    return not_writable(dir, "create it", ec.message());
  }
  if (ec) return Status::error("--data-dir " + dir + ": cannot create: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) return Status::error("--data-dir " + dir + ": not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return not_writable(dir, "write in it", std::strerror(errno));
  }
  for (const char* name : {"history.sqlite", "accepted.journal"}) {
    const std::string file = dir + "/" + name;
    if (::access(file.c_str(), F_OK) == 0 && ::access(file.c_str(), R_OK | W_OK) != 0) {
      return not_writable(dir, std::string("write its ") + name, std::strerror(errno));
    }
  }
  return Status();
}

Result<std::unique_ptr<DataDirLock>> DataDirLock::take(const std::string& dir) {
  const std::string path = dir + "/fp8scoped.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::error("--data-dir " + dir + ": cannot open " + path + ": " + std::strerror(errno));
  std::unique_ptr<DataDirLock> lock(new DataDirLock(fd));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    const std::string owner = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : std::string("unknown");
    if (error != EWOULDBLOCK) return Status::error("--data-dir " + dir + ": cannot lock " + path + ": " + std::strerror(error));
    return Status::error("--data-dir " + dir + ": another fp8scoped (pid " +
                         owner.substr(0, owner.find_first_not_of("0123456789")) +
                         ") uses it; stop that one, or give this one a --data-dir of its own");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return Status::error("--data-dir " + dir + ": cannot write " + path + ": " + std::strerror(errno));
  }
  return lock;
}

DataDirLock::~DataDirLock() { ::close(fd_); }

}  // namespace fp8scope::server
