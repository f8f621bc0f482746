// The scale tensor `analyze` and `push` read with --scales: a tensor of the file they read, or the
// first tensor of another .npy/.safetensors file; its bytes as stored, whatever element type the
// file gives them (E8M0 and UE4M3 codes have no NumPy type).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "fp8scope/kernels/status.h"
#include "fp8scope/tensorfile/tensor_file.h"

namespace fp8scope::cli {

struct ScaleSource {
  std::optional<TensorFile> other;     // the file the scales came from, when not FILE
  std::string tensor;                  // their name in FILE, when they came from it
  std::span<const std::uint8_t> bytes;
};

Result<ScaleSource> read_scale_source(const std::string& scales, const TensorFile& file);

}  // namespace fp8scope::cli
