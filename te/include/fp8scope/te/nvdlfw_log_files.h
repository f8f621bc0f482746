// Where nvdlfw_inspect statistics log lines go on disk: one file a rank, as nvdlfw_inspect lays
// them out (<dir>/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-<rank>.log), or with
// per_job one such tree a job (<dir>/<job>/...), for a daemon that hears many jobs; with
// rank_dirs each rank's tree in <dir>/rank_<rank>/, as BioNeMo's recipes give each rank its own
// log_dir and its fp8_analysis reader expects (bionemo-framework 3a9d005,
// bionemo-recipes/recipes/fp8_analysis/README.md:43-51, analyze_and_create_heatmap.py:529).
//
// Written for a daemon that must survive its disk and its clients:
//  - a block of lines goes in whole or not at all: a write cut short (a full disk, a file size
//    limit) is truncated back, so readers never see half a line;
//  - bounded: the bytes of all files together (counting what they held when first opened), the
//    number of files, and the descriptors held open (the least recently used are closed);
//  - nothing below `dir` is followed through a symbolic link, only regular files are written, and
//    a job's name is escaped into one path component (no "/", no leading ".").
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "fp8scope/kernels/status.h"

namespace fp8scope::te {

struct NvdlfwLogFilesOptions {
  bool per_job = false;   // <dir>/<job>/nvdlfw_inspect_statistics_logs/... instead of <dir>/nvdlfw_...
  bool truncate = false;  // start each file empty (an export) instead of appending to it (the daemon)
  bool rank_dirs = false; // <dir>[/<job>]/rank_<rank>/nvdlfw_inspect_statistics_logs/...
  std::uint64_t max_bytes = std::numeric_limits<std::uint64_t>::max();
  std::size_t max_files = 4096;
  std::size_t max_open = 64;
};

enum class AppendOutcome { kWritten, kSizeLimit, kTooManyFiles, kFailed };

class NvdlfwLogFiles {
 public:
  // Creates `dir` if missing; an error if it cannot be made or opened.
  static Result<std::unique_ptr<NvdlfwLogFiles>> open(const std::string& dir, NvdlfwLogFilesOptions options);
  ~NvdlfwLogFiles();
  NvdlfwLogFiles(const NvdlfwLogFiles&) = delete;
  NvdlfwLogFiles& operator=(const NvdlfwLogFiles&) = delete;

  // Appends `block` (whole lines, each ending in '\n') to the file of `job` (ignored unless
  // per_job) and `rank`. kFailed leaves the file as it was and error() says why.
  AppendOutcome append(const std::string& job, std::uint32_t rank, const std::string& block);

  const std::string& error() const { return error_; }
  std::uint64_t bytes() const { return bytes_; }  // in all files now
  // The path of a job's and rank's file (the job escaped as it is on disk).
  std::string path_of(const std::string& job, std::uint32_t rank) const;

 private:
  struct File {
    int fd = -1;  // -1 while closed
    std::uint64_t size = 0;
    std::uint64_t last_use = 0;
  };
  using Key = std::pair<std::string, std::uint32_t>;  // escaped job ("" unless per_job), rank

  NvdlfwLogFiles(std::string dir, int dir_fd, NvdlfwLogFilesOptions options)
      : dir_(std::move(dir)), dir_fd_(dir_fd), options_(options) {}
  std::string path_of(const Key& key) const;
  // Opens (creating) a key's file, closing the least recently used one if too many are open.
  bool open_file(const Key& key, File& file, bool first);
  bool fail(const Key& key, const std::string& why);

  const std::string dir_;
  const int dir_fd_;
  const NvdlfwLogFilesOptions options_;
  std::map<Key, File> files_;
  std::size_t open_ = 0;
  std::uint64_t bytes_ = 0, uses_ = 0;
  std::string error_;
};

// A job's name as one path component: bytes other than [A-Za-z0-9._-], and a leading '.', become
// %XX ("" becomes "%"), so "../x" or "a/b" stay inside the log dir and no two names share one. An
// escape longer than kMaxEscapedJob bytes (a legal 200-byte name can triple) keeps its head and
// ends in "%~" and the name's 64-bit FNV-1a hash, so every legal name is a legal file name
// (NAME_MAX, 255 bytes) and two long names share one only if their hashes collide.
inline constexpr std::size_t kMaxEscapedJob = 200;
std::string escape_job(const std::string& job);

}  // namespace fp8scope::te
