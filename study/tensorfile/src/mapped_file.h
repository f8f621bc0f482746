// A read-only memory map of a whole file, so a multi-GiB checkpoint is not copied to be read.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "fp8scope/kernels/status.h"

namespace fp8scope {

class MappedFile {
 public:
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }

 private:
  MappedFile(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  const std::uint8_t* data_;
  std::size_t size_;
};

}  // namespace fp8scope
