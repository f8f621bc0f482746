// What a format reader hands back to read_tensor_file(): the tensors, and any copies it had to
// make to give C-order little-endian bytes. Errors are returned without the path; the caller
// prefixes it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fp8scope/kernels/status.h"
#include "fp8scope/tensorfile/tensor_file.h"

namespace fp8scope::tensorfile {

struct ParsedFile {
  std::vector<FileTensor> tensors;
  std::vector<std::vector<std::uint8_t>> owned;
};

// Element count of a shape, or an error when a dimension is negative or the product overflows.
Result<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape);

Status parse_npy(std::span<const std::uint8_t> file, const std::string& name, const ReadOptions& options,
                 ParsedFile* out);
Status parse_safetensors(std::span<const std::uint8_t> file, ParsedFile* out);

}  // namespace fp8scope::tensorfile
