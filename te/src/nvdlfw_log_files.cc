#include "fp8scope/te/nvdlfw_log_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "fp8scope/te/nvdlfw_log.h"

namespace fp8scope::te {
namespace {

constexpr const char* kLogsDir = "nvdlfw_inspect_statistics_logs";

std::string errno_text(int e) { return std::strerror(e); }

// The directory `name` in `parent`, made if missing, never through a link. -1 and errno on failure.
int open_subdir(int parent, const char* name) {
  if (::mkdirat(parent, name, 0750) != 0 && errno != EEXIST) return -1;
  return ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

// write(2) until all of `data` is written or it fails; false with errno set.
bool write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace

std::string escape_job(const std::string& job) {
  if (job.empty()) return "%";
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  const auto shortened = [&] {
    std::uint64_t h = 14695981039346656037ull;  // FNV-1a 64
    for (const char c : job) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    std::string tail = "%~";
    for (int shift = 60; shift >= 0; shift -= 4) tail += kHex[(h >> shift) & 15];
    std::size_t keep = kMaxEscapedJob - tail.size();
    // Not inside a %XX: the head stays a prefix of the escape.
    if (out[keep - 1] == '%') {
      keep -= 1;
    } else if (out[keep - 2] == '%') {
      keep -= 2;
    }
    return out.substr(0, keep) + tail;
  };
  for (std::size_t i = 0; i < job.size(); ++i) {
    const auto c = static_cast<unsigned char>(job[i]);
    const bool plain = std::isalnum(c) != 0 || c == '_' || c == '-' || (c == '.' && i > 0);
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out.size() > kMaxEscapedJob ? shortened() : out;
}

Result<std::unique_ptr<NvdlfwLogFiles>> NvdlfwLogFiles::open(const std::string& dir, NvdlfwLogFilesOptions options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error(dir + ": cannot create the directory: " + ec.message());
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::error(dir + ": cannot open the directory: " + errno_text(errno));
  if (::faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::error(dir + ": cannot create files in it: " + errno_text(e));
  }
  return std::unique_ptr<NvdlfwLogFiles>(new NvdlfwLogFiles(dir, fd, options));
}

NvdlfwLogFiles::~NvdlfwLogFiles() {
  for (auto& [key, file] : files_) {
    if (file.fd >= 0) ::close(file.fd);
  }
  ::close(dir_fd_);
}

std::string NvdlfwLogFiles::path_of(const std::string& job, std::uint32_t rank) const {
  return path_of({options_.per_job ? escape_job(job) : "", rank});
}

std::string NvdlfwLogFiles::path_of(const Key& key) const {
  const std::string job_dir = options_.per_job ? dir_ + "/" + key.first : dir_;
  return NvdlfwLog::file_of(options_.rank_dirs ? job_dir + "/rank_" + std::to_string(key.second) : job_dir, key.second);
}

bool NvdlfwLogFiles::fail(const Key& key, const std::string& why) {
  error_ = path_of(key) + ": " + why;
  return false;
}

bool NvdlfwLogFiles::open_file(const Key& key, File& file, bool first) {
  if (open_ > 0 && open_ >= options_.max_open) {  // the least recently used one makes room
    File* oldest = nullptr;
    for (auto& [k, f] : files_) {
      if (f.fd >= 0 && (oldest == nullptr || f.last_use < oldest->last_use)) oldest = &f;
    }
    ::close(oldest->fd);
    oldest->fd = -1;
    --open_;
  }
  int parent = dir_fd_;
  int job_fd = -1, rank_fd = -1;
  if (options_.per_job) {
    job_fd = open_subdir(dir_fd_, key.first.c_str());
    if (job_fd < 0) return fail(key, "cannot open the job's directory (a link is not followed): " + errno_text(errno));
    parent = job_fd;
  }
  if (options_.rank_dirs) {
    rank_fd = open_subdir(parent, ("rank_" + std::to_string(key.second)).c_str());
    const int rank_errno = errno;
    if (job_fd >= 0) ::close(job_fd);
    job_fd = -1;
    if (rank_fd < 0) return fail(key, "cannot open the rank's directory (a link is not followed): " + errno_text(rank_errno));
    parent = rank_fd;
  }
  const int logs_fd = open_subdir(parent, kLogsDir);
  const int logs_errno = errno;
  if (job_fd >= 0) ::close(job_fd);
  if (rank_fd >= 0) ::close(rank_fd);
  if (logs_fd < 0) return fail(key, std::string("cannot open ") + kLogsDir + " (a link is not followed): " + errno_text(logs_errno));
  const std::string name = "nvdlfw_inspect_globalrank-" + std::to_string(key.second) + ".log";
  // O_NONBLOCK: a FIFO planted in its place must not hang the writer; it is refused below.
  const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_APPEND | (first && options_.truncate ? O_TRUNC : 0);
  const int fd = ::openat(logs_fd, name.c_str(), flags, 0640);
  const int open_errno = errno;
  ::close(logs_fd);
  if (fd < 0) return fail(key, "cannot open (a link is not followed): " + errno_text(open_errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(key, "not a regular file");
  }
  file.fd = fd;  // what it holds is counted by append(), which reads its size before each write
  ++open_;
  return true;
}

AppendOutcome NvdlfwLogFiles::append(const std::string& job, std::uint32_t rank, const std::string& block) {
  const Key key{options_.per_job ? escape_job(job) : "", rank};
  auto found = files_.find(key);
  const bool first = found == files_.end();
  if (first && files_.size() >= options_.max_files) return AppendOutcome::kTooManyFiles;
  File& file = first ? files_[key] : found->second;
  if (file.fd < 0 && !open_file(key, file, first)) {
    if (first) files_.erase(key);
    return AppendOutcome::kFailed;
  }
  file.last_use = ++uses_;
  // The file's size now, not as last written: what a file held before it was first opened counts,
  // logrotate's copytruncate may have emptied it, and a cut-short write must be taken back to
  // where this block started.
  struct stat st {};
  if (::fstat(file.fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) != file.size) {
    bytes_ = bytes_ - file.size + static_cast<std::uint64_t>(st.st_size);
    file.size = static_cast<std::uint64_t>(st.st_size);
  }
  if (block.size() > options_.max_bytes || bytes_ > options_.max_bytes - block.size()) return AppendOutcome::kSizeLimit;
  if (!write_all(file.fd, block.data(), block.size())) {
    const int e = errno;
    // Whatever part of the block reached the file goes again, so readers never see half a line.
    const int cut = ::ftruncate(file.fd, static_cast<off_t>(file.size));
    ::close(file.fd);
    file.fd = -1;
    --open_;
    fail(key, "write failed: " + errno_text(e) + (cut != 0 ? ", and truncating back failed: " + errno_text(errno) : ""));
    return AppendOutcome::kFailed;
  }
  file.size += block.size();
  bytes_ += block.size();
  return AppendOutcome::kWritten;
}

}  // namespace fp8scope::te
