// The daemon's state directory, checked before anything is opened in it: a directory the daemon's
// user cannot write (a Kubernetes hostPath kubelet created as root, a copied /var/lib) gets one
// message that names the path, the user and what the directory allows, instead of SQLite's
// "unable to open database file".
// One daemon a data dir: a second one on the same dir is refused before it touches anything there
// (it would rewrite the first one's live journal and take over its shared-memory socket).
#pragma once

#include <memory>
#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope::server {

// Creates `dir` (and its parents) if missing and checks that this process can create files in it.
Status prepare_data_dir(const std::string& dir);

// An exclusive flock on `dir`/fp8scoped.lock, which holds the owner's pid, for as long as it lives.
class DataDirLock {
 public:
  // An error naming the other daemon's pid when one holds the lock.
  static Result<std::unique_ptr<DataDirLock>> take(const std::string& dir);
  ~DataDirLock();
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace fp8scope::server
