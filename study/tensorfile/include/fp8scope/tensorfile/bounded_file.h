// Small files read whole from paths a user or an export names (a config, an index, a TE debug
// config): only regular files, opened without blocking (a FIFO or a device is refused, never
// waited on or read forever), and only up to `max_bytes` (a larger file is refused before any of it
// is parsed). Symbolic links are followed; one that loops is an error like any other.
#pragma once

#include <cstdint>
#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope::tensorfile {

// The file's bytes, or an error that names `path` and says why ("not a regular file (a FIFO)",
// "larger than 262144 bytes", the system's reason).
Result<std::string> read_bounded_file(const std::string& path, std::uint64_t max_bytes);

}  // namespace fp8scope::tensorfile
