#include "fp8scope/tensorfile/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace fp8scope::tensorfile {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

Result<std::string> read_bounded_file(const std::string& path, std::uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = std::string("cannot stat: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = std::string("not a regular file (") + kind_of(st.st_mode) + ")";
  } else if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    why = "larger than " + std::to_string(max_bytes) + " bytes (" + std::to_string(st.st_size) + ")";
  }
  std::string text;
  if (why.empty()) {
    // Read at most one byte past the limit: a file that grew since fstat is still refused.
    text.resize(static_cast<std::size_t>(st.st_size) + 1);
    std::size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        why = std::string("cannot read: ") + std::strerror(errno);
        break;
      }
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
      if (got > max_bytes) {
        why = "larger than " + std::to_string(max_bytes) + " bytes";
        break;
      }
      if (got == text.size()) text.resize(std::min<std::size_t>(text.size() * 2, max_bytes + 1));
    }
    text.resize(got);
  }
  ::close(fd);
  if (!why.empty()) return Status::error(path + ": " + why);
  return text;
}

}  // namespace fp8scope::tensorfile
