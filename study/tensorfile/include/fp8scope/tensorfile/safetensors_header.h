// The header of a Hugging Face .safetensors file (huggingface/safetensors README.md "Format",
// src/tensor.rs): an 8-byte little-endian size N, N bytes of JSON mapping each tensor name to
// {dtype, shape, data_offsets} (plus an optional "__metadata__" of strings), then the data region
// the offsets index. Parsed on its own so a checkpoint's shards are listed without reading their
// data; `read_tensor_file` and the checkpoint reader share it. Old writers did not pad N to a
// multiple of 8, so nothing here assumes alignment.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/dtype.h"

namespace fp8scope::tensorfile {

// Every dtype string the format defines (src/tensor.rs:808-863), with its bits per element and
// what fp8scope makes of it: the one table of safetensors dtypes (analyze and checkpoint read it).
struct SafetensorsDtype {
  const char* name;
  int bits;
  std::optional<DType> dtype;  // the elements fp8scope reads as values
  const char* skip_reason;     // "" when dtype is set
  const FloatFormat* codes;    // a low-precision float's row (float_formats.h), else null
};
const SafetensorsDtype* find_safetensors_dtype(std::string_view name);
std::span<const SafetensorsDtype> safetensors_dtypes();

struct SafetensorsEntry {
  std::string name;
  const SafetensorsDtype* dtype = nullptr;
  std::vector<std::int64_t> shape;  // elements (F4: its logical count, two a byte); empty for 0-d
  std::uint64_t begin = 0, end = 0;  // bytes, within the data region

  std::int64_t numel() const;
  std::uint64_t bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::uint64_t data_offset = 0;  // where the data region starts in the file: 8 + N
  std::uint64_t data_bytes = 0;   // the data region's length: the rest of the file
  std::vector<SafetensorsEntry> entries;  // in the header's order; a name given twice: its last entry
  std::map<std::string, std::string> metadata;
  // Names the header gives more than once (the format disallows it; loaders take the last entry,
  // as nlohmann's and Hugging Face's parsers do), once per repeat.
  std::vector<std::string> repeated_names;
};

// The header's total length (8 + N) from a file's first 8 bytes, checked against its size.
Result<std::uint64_t> safetensors_header_bytes(std::span<const std::uint8_t> first8, std::uint64_t file_size);

// Parses the first 8 + N bytes of a file of `file_size` bytes. Errors name the tensor, never the
// file (the caller prefixes it): a dtype the format does not have, a shape whose bits are not
// whole bytes, offsets outside the data region or whose span is not shape x dtype.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::uint8_t> head, std::uint64_t file_size);

// The reference reader's stricter rule (src/tensor.rs:631, 419-422): the tensors cover the data
// region exactly, in order, with no gap, overlap or trailing bytes.
Status check_data_covered(const SafetensorsHeader& header);

}  // namespace fp8scope::tensorfile
