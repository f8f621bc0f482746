// Hugging Face .safetensors (huggingface/safetensors docs, "Format"): an 8-byte little-endian
// header size N, N bytes of JSON mapping each tensor name to {dtype, shape, data_offsets} (plus an
// optional "__metadata__" of strings), then the data region the offsets index. Old writers did not
// pad N to a multiple of 8, so nothing here assumes alignment.
#include "fp8scope/tensorfile/safetensors_header.h"
#include "parsed_file.h"

namespace fp8scope::tensorfile {

Status parse_safetensors(std::span<const std::uint8_t> file, ParsedFile* out) {
  Result<SafetensorsHeader> header = parse_safetensors_header(file, file.size());
  if (!header.ok()) return header.status();
  const std::span<const std::uint8_t> data = file.subspan(header.value().data_offset);
  for (const SafetensorsEntry& e : header.value().entries) {
    FileTensor t;
    t.name = e.name;
    t.file_dtype = e.dtype->name;
    t.shape = e.shape;
    t.bytes = data.subspan(e.begin, e.end - e.begin);
    t.dtype = e.dtype->dtype;
    t.skip_reason = e.dtype->skip_reason;
    out->tensors.push_back(std::move(t));
  }
  return Status();
}

}  // namespace fp8scope::tensorfile
