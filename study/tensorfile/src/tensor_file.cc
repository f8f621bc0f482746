#include "fp8scope/tensorfile/tensor_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "mapped_file.h"
#include "parsed_file.h"

namespace fp8scope {

std::int64_t FileTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

TensorView FileTensor::view(float scale_inv) const {
  TensorView v;
  v.data = bytes.data();
  v.dtype = dtype.value_or(DType::kF32);
  v.cols = shape.empty() ? 1 : shape.back();
  v.rows = v.cols == 0 ? 0 : numel() / v.cols;
  v.scale_inv = scale_inv;
  return v;
}

TensorFile::TensorFile(TensorFile&&) noexcept = default;
TensorFile& TensorFile::operator=(TensorFile&&) noexcept = default;
TensorFile::~TensorFile() = default;

const FileTensor* TensorFile::find(const std::string& name) const {
  for (const FileTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace tensorfile {

Result<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return Status::error("negative dimension " + std::to_string(d) + " in the shape");
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      return Status::error("the shape's element count overflows 64 bits");
    }
    n *= d;
  }
  return n;
}

}  // namespace tensorfile

Result<TensorFile> read_tensor_file(const std::string& path, const ReadOptions& options) {
  auto mapped = MappedFile::open(path);
  if (!mapped.ok()) return mapped.status();
  const std::span<const std::uint8_t> bytes = mapped.value()->bytes();
  tensorfile::ParsedFile parsed;
  Status status;
  if (bytes.size() >= 6 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0) {
    std::string stem = path.substr(path.find_last_of('/') + 1);
    if (const auto dot = stem.rfind('.'); dot != std::string::npos && dot > 0) stem.resize(dot);
    status = tensorfile::parse_npy(bytes, stem, options, &parsed);
  } else if (bytes.size() >= 9 && bytes[8] == '{') {
    status = tensorfile::parse_safetensors(bytes, &parsed);
  } else if (bytes.empty()) {
    status = Status::error("empty file");
  } else {
    status = Status::error("neither a .npy file (magic \\x93NUMPY) nor a .safetensors file (size + '{')");
  }
  if (!status.ok()) return Status::error(path + ": " + status.message());
  // Files do not promise aligned data (old safetensors writers did not pad the header, an .npy
  // header can end anywhere); the engines read whole elements, so misaligned tensors are copied.
  for (FileTensor& t : parsed.tensors) {
    const auto size = static_cast<std::uintptr_t>(t.dtype ? std::max(1, dtype_bytes(*t.dtype)) : 1);
    if (reinterpret_cast<std::uintptr_t>(t.bytes.data()) % size == 0) continue;
    parsed.owned.emplace_back(t.bytes.begin(), t.bytes.end());
    t.bytes = parsed.owned.back();
  }
  TensorFile file;
  file.path_ = path;
  file.file_ = std::move(mapped).value();
  file.owned_ = std::move(parsed.owned);
  file.tensors_ = std::move(parsed.tensors);
  return file;
}

}  // namespace fp8scope
