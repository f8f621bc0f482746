// Reading tensors from the files people already have: NumPy .npy (np.save) and .safetensors
// (Hugging Face). Every tensor in a file is listed; those fp8scope can analyze carry a DType and
// their bytes in C order, the rest (integers, booleans) say why they are skipped. A file that is
// not what it claims gives one error line naming the file and the problem.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/stats_engine.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope {

class MappedFile;

struct FileTensor {
  std::string name;                 // the safetensors key; the file's stem for .npy
  std::string file_dtype;           // as the file spells it: "BF16", "<f4", "|b1", ...
  std::vector<std::int64_t> shape;  // empty for a 0-d tensor
  std::optional<DType> dtype;       // set when fp8scope can analyze the elements
  std::string skip_reason;          // set when it cannot
  std::span<const std::uint8_t> bytes;  // C-order little-endian elements (valid while the file lives)

  std::int64_t numel() const;
  // rows x cols with the last dimension as cols; a 0-d tensor is 1 x 1.
  TensorView view(float scale_inv = 1.0f) const;
};

struct ReadOptions {
  // How to read .npy element types NumPy cannot name: ml_dtypes saves bfloat16 as '<V2' and float8
  // as '|V1'; others store raw bits as '<u2' / '|u1'. Without this such tensors are skipped.
  std::optional<DType> npy_raw_dtype;
};

class TensorFile {
 public:
  TensorFile(TensorFile&&) noexcept;
  TensorFile& operator=(TensorFile&&) noexcept;
  ~TensorFile();

  const std::string& path() const { return path_; }
  const std::vector<FileTensor>& tensors() const { return tensors_; }
  const FileTensor* find(const std::string& name) const;

 private:
  friend Result<TensorFile> read_tensor_file(const std::string& path, const ReadOptions& options);
  TensorFile() = default;
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  std::vector<std::vector<std::uint8_t>> owned_;  // re-ordered copies (Fortran order, big-endian)
  std::vector<FileTensor> tensors_;
};

// Reads a .npy or .safetensors file (chosen by its first bytes, not its name). Errors read
// "PATH: <problem>".
Result<TensorFile> read_tensor_file(const std::string& path, const ReadOptions& options = {});

}  // namespace fp8scope
