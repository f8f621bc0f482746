// The daemon's state directory, checked before anything is opened in it: a directory the daemon's
// user cannot write (a Kubernetes hostPath kubelet created as root, a copied /var/lib) gets one
// message that names the path, the user and what the directory allows, instead of SQLite's
// "unable to open database file".
#pragma once

#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope::server {

// Creates `dir` (and its parents) if missing and checks that this process can create files in it.
Status prepare_data_dir(const std::string& dir);

}  // namespace fp8scope::server
