#include "fp8scope/cli/scale_source.h"

namespace fp8scope::cli {

Result<ScaleSource> read_scale_source(const std::string& scales, const TensorFile& file) {
  ScaleSource s;
  if (const FileTensor* t = file.find(scales)) {
    s.tensor = t->name;
    s.bytes = t->bytes;
    return s;
  }
  Result<TensorFile> other = read_tensor_file(scales);
  if (!other.ok()) return Status::error("--scales: expected a tensor of " + file.path() + " or a file, got: " + other.message());
  if (other.value().tensors().empty()) return Status::error("--scales " + scales + ": the file holds no tensor");
  s.other.emplace(std::move(other).value());
  s.bytes = s.other->tensors().front().bytes;
  return s;
}

}  // namespace fp8scope::cli
