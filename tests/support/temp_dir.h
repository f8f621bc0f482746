// A scratch directory for one test, removed with everything in it when the test ends.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fp8scope::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fp8scope-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Writes bytes to a file in the directory and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(file(name), std::ios::binary) << bytes;
    return file(name);
  }

 private:
  std::string path_;
};

// The directory of real files from the reference writers (../shared/testdata/real). Every checkout
// CI tests has it beside it: a test that reads it fails when it is missing, never skips.
inline std::string shared_testdata() { return FP8SCOPE_SHARED_TESTDATA; }

// Bytes of a little-endian value.
template <class T>
std::string le_bytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

// A .npy v1.0 file as np.save writes it: header padded with spaces to a multiple of 64 bytes.
inline std::string npy_file(const std::string& descr, bool fortran, const std::string& shape, const std::string& data) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + shape + ", }";
  std::size_t total = 10 + dict.size() + 1;
  dict += std::string((64 - total % 64) % 64, ' ') + "\n";
  const auto len = static_cast<std::uint16_t>(dict.size());
  return std::string("\x93NUMPY\x01\x00", 8) + le_bytes(len) + dict + data;
}

// A .safetensors file from its JSON header and data region.
inline std::string safetensors_file(const std::string& header, const std::string& data) {
  return le_bytes(static_cast<std::uint64_t>(header.size())) + header + data;
}

}  // namespace fp8scope::testing
