// Hugging Face .safetensors (huggingface/safetensors docs, "Format"): an 8-byte little-endian
// header size N, N bytes of JSON mapping each tensor name to {dtype, shape, data_offsets} (plus an
// optional "__metadata__" of strings), then the data region the offsets index. Old writers did not
// pad N to a multiple of 8, so nothing here assumes alignment.
#include <nlohmann/json.hpp>

#include <cstring>
#include <string_view>

#include "parsed_file.h"

namespace fp8scope::tensorfile {
namespace {

// Keeps the generous bound of the reference reader (100 MB) on the JSON header.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct StDtype {
  const char* name;
  int bits;
  std::optional<DType> dtype;
  const char* skip_reason;
};

// F4 (float4_e2m1fn, two a byte) has a logical shape; its bytes are half its element count.
constexpr StDtype kStDtypes[] = {
    {"F64", 64, DType::kF64, ""},        {"F32", 32, DType::kF32, ""},
    {"F16", 16, DType::kF16, ""},        {"BF16", 16, DType::kBF16, ""},
    {"F8_E4M3", 8, DType::kE4M3, ""},    {"F8_E5M2", 8, DType::kE5M2, ""},
    {"F4", 4, DType::kE2M1, ""},
    {"I64", 64, std::nullopt, "integer tensor"}, {"I32", 32, std::nullopt, "integer tensor"},
    {"I16", 16, std::nullopt, "integer tensor"}, {"I8", 8, std::nullopt, "integer tensor"},
    {"U64", 64, std::nullopt, "integer tensor"}, {"U32", 32, std::nullopt, "integer tensor"},
    {"U16", 16, std::nullopt, "integer tensor"}, {"U8", 8, std::nullopt, "integer tensor"},
    {"BOOL", 8, std::nullopt, "boolean tensor"}, {"F8_E8M0", 8, std::nullopt, "E8M0 scale tensor"},
    {"C64", 64, std::nullopt, "complex tensor"},
};

const StDtype* find_dtype(std::string_view name) {
  for (const StDtype& d : kStDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

Status bad(const std::string& what) { return Status::error("bad safetensors header: " + what); }

}  // namespace

Status parse_safetensors(std::span<const std::uint8_t> file, ParsedFile* out) {
  if (file.size() < 8) {
    return Status::error("truncated: expected an 8-byte header size, the file has " + std::to_string(file.size()) +
                         " bytes");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<std::size_t>(i)];
  if (n > kMaxHeaderBytes) return bad("header size " + std::to_string(n) + " exceeds 100 MB");
  if (n > file.size() - 8) {
    return Status::error("truncated: the header size says " + std::to_string(n) + " bytes, the file has " +
                         std::to_string(file.size() - 8) + " after it");
  }
  const auto* text = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(text, text + n, nullptr, false);
  if (header.is_discarded()) return bad("not valid JSON");
  if (!header.is_object()) return bad("expected a JSON object");
  const std::span<const std::uint8_t> data = file.subspan(8 + n);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad("expected __metadata__ to be an object of strings");
      continue;
    }
    if (!entry.is_object()) return bad("entry '" + name + "' is not an object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string() || shape == entry.end() || !shape->is_array() ||
        offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
      return bad("entry '" + name + "' needs dtype (string), shape (array) and data_offsets ([begin, end])");
    }
    FileTensor t;
    t.name = name;
    t.file_dtype = dtype->get<std::string>();
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) return bad("entry '" + name + "' has a shape dimension that is not a count");
      t.shape.push_back(static_cast<std::int64_t>(std::min<std::uint64_t>(d.get<std::uint64_t>(), INT64_MAX)));
    }
    if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return bad("entry '" + name + "' has data_offsets that are not byte counts");
    }
    const auto begin = (*offsets)[0].get<std::uint64_t>();
    const auto end = (*offsets)[1].get<std::uint64_t>();
    const StDtype* st = find_dtype(t.file_dtype);
    if (st == nullptr) return Status::error("tensor '" + name + "': unsupported dtype " + t.file_dtype);
    Result<std::int64_t> numel = checked_numel(t.shape);
    if (!numel.ok()) return Status::error("tensor '" + name + "': " + numel.message());
    if (begin > end || end > data.size()) {
      return Status::error("tensor '" + name + "': data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + "] fall outside the " + std::to_string(data.size()) +
                           "-byte data region (truncated file?)");
    }
    const std::uint64_t bits = static_cast<std::uint64_t>(numel.value()) * static_cast<std::uint64_t>(st->bits);
    const std::uint64_t expected = (bits + 7) / 8;
    if (end - begin != expected) {
      return Status::error("tensor '" + name + "': shape x dtype is " + std::to_string(expected) +
                           " bytes, data_offsets span " + std::to_string(end - begin));
    }
    t.bytes = data.subspan(begin, end - begin);
    t.dtype = st->dtype;
    t.skip_reason = st->skip_reason;
    out->tensors.push_back(std::move(t));
  }
  return Status();
}

}  // namespace fp8scope::tensorfile
