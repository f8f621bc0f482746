#include "fp8scope/daemon/data_dir.h"

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

}  // namespace fp8scope::server
