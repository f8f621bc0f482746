#include "fp8scope/tensorfile/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <string_view>
#include <unordered_set>

namespace fp8scope::tensorfile {
namespace {

// Keeps the generous bound of the reference reader (100 MB, src/tensor.rs:10) on the JSON header.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// F4 (float4_e2m1fn, two a byte) has a logical shape; its bytes are half its element count.
constexpr SafetensorsDtype kDtypes[] = {
    {"F64", 64, DType::kF64, "", nullptr},
    {"F32", 32, DType::kF32, "", nullptr},
    {"F16", 16, DType::kF16, "", nullptr},
    {"BF16", 16, DType::kBF16, "", nullptr},
    {"F8_E4M3", 8, DType::kE4M3, "", &kE4M3},
    {"F8_E5M2", 8, DType::kE5M2, "", &kE5M2},
    {"F4", 4, DType::kE2M1, "", &kE2M1},
    {"F8_E4M3FNUZ", 8, std::nullopt, "E4M3 FNUZ codes (bias 8, one NaN), not the OCP E4M3 GEMMs read", &kE4M3Fnuz},
    {"F8_E5M2FNUZ", 8, std::nullopt, "E5M2 FNUZ codes (bias 16, one NaN)", &kE5M2Fnuz},
    {"F8_E8M0", 8, std::nullopt, "E8M0 scale tensor", nullptr},
    {"F6_E2M3", 6, std::nullopt, "FP6 tensor", nullptr},
    {"F6_E3M2", 6, std::nullopt, "FP6 tensor", nullptr},
    {"I64", 64, std::nullopt, "integer tensor", nullptr},
    {"I32", 32, std::nullopt, "integer tensor", nullptr},
    {"I16", 16, std::nullopt, "integer tensor", nullptr},
    {"I8", 8, std::nullopt, "integer tensor", nullptr},
    {"U64", 64, std::nullopt, "integer tensor", nullptr},
    {"U32", 32, std::nullopt, "integer tensor", nullptr},
    {"U16", 16, std::nullopt, "integer tensor", nullptr},
    {"U8", 8, std::nullopt, "integer tensor", nullptr},
    {"BOOL", 8, std::nullopt, "boolean tensor", nullptr},
    {"C64", 64, std::nullopt, "complex tensor", nullptr},
};

Status bad(const std::string& what) { return Status::error("bad safetensors header: " + what); }

Result<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      return Status::error("the shape's element count overflows 64 bits");
    }
    n *= d;
  }
  return n;
}

// The top-level keys of a JSON object in order, and those given more than once (SAX: linear).
struct TopLevelKeys : nlohmann::json_sax<nlohmann::json> {
  std::vector<std::string> order, repeated;
  std::unordered_set<std::string> seen;
  int depth = 0;

  bool key(string_t& k) override {
    if (depth != 1) return true;
    if (seen.insert(k).second) {
      order.push_back(k);
    } else {
      repeated.push_back(k);
    }
    return true;
  }
  bool start_object(std::size_t) override {
    ++depth;
    return true;
  }
  bool end_object() override {
    --depth;
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth;
    return true;
  }
  bool end_array() override {
    --depth;
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

Result<SafetensorsEntry> parse_entry(const std::string& name, const nlohmann::json& entry,
                                     std::uint64_t data_bytes) {
  if (!entry.is_object()) return bad("entry '" + name + "' is not an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || !dtype->is_string() || shape == entry.end() || !shape->is_array() ||
      offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    return bad("entry '" + name + "' needs dtype (string), shape (array) and data_offsets ([begin, end])");
  }
  SafetensorsEntry e;
  e.name = name;
  const std::string dtype_name = dtype->get<std::string>();
  e.dtype = find_safetensors_dtype(dtype_name);
  if (e.dtype == nullptr) return Status::error("tensor '" + name + "': unsupported dtype " + dtype_name);
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) return bad("entry '" + name + "' has a shape dimension that is not a count");
    if (d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return Status::error("tensor '" + name + "': the shape's element count overflows 64 bits");
    }
    e.shape.push_back(d.get<std::int64_t>());
  }
  if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return bad("entry '" + name + "' has data_offsets that are not byte counts");
  }
  e.begin = (*offsets)[0].get<std::uint64_t>();
  e.end = (*offsets)[1].get<std::uint64_t>();
  Result<std::int64_t> numel = checked_numel(e.shape);
  if (!numel.ok()) return Status::error("tensor '" + name + "': " + numel.message());
  if (static_cast<std::uint64_t>(numel.value()) > std::numeric_limits<std::uint64_t>::max() / 64) {
    return Status::error("tensor '" + name + "': the shape's element count overflows 64 bits");
  }
  const std::uint64_t bits = static_cast<std::uint64_t>(numel.value()) * static_cast<std::uint64_t>(e.dtype->bits);
  if (bits % 8 != 0) {  // src/tensor.rs:648-654
    return Status::error("tensor '" + name + "': " + dtype_name + " of " + std::to_string(numel.value()) +
                         " elements is not a whole number of bytes");
  }
  if (e.begin > e.end || e.end > data_bytes) {
    return Status::error("tensor '" + name + "': data_offsets [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.end) + "] fall outside the " + std::to_string(data_bytes) +
                         "-byte data region (truncated file?)");
  }
  if (e.end - e.begin != bits / 8) {
    return Status::error("tensor '" + name + "': shape x dtype is " + std::to_string(bits / 8) +
                         " bytes, data_offsets span " + std::to_string(e.end - e.begin));
  }
  return e;
}

}  // namespace

std::span<const SafetensorsDtype> safetensors_dtypes() { return kDtypes; }

const SafetensorsDtype* find_safetensors_dtype(std::string_view name) {
  for (const SafetensorsDtype& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

Result<std::uint64_t> safetensors_header_bytes(std::span<const std::uint8_t> first8, std::uint64_t file_size) {
  if (first8.size() < 8 || file_size < 8) {
    return Status::error("truncated: expected an 8-byte header size, the file has " + std::to_string(file_size) +
                         " bytes");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[static_cast<std::size_t>(i)];
  if (n > kMaxHeaderBytes) return bad("header size " + std::to_string(n) + " exceeds 100 MB");
  if (n > file_size - 8) {
    return Status::error("truncated: the header size says " + std::to_string(n) + " bytes, the file has " +
                         std::to_string(file_size - 8) + " after it");
  }
  return 8 + n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::uint8_t> head, std::uint64_t file_size) {
  Result<std::uint64_t> length = safetensors_header_bytes(head, file_size);
  if (!length.ok()) return length.status();
  if (head.size() < length.value()) return bad("expected " + std::to_string(length.value()) + " header bytes");
  SafetensorsHeader h;
  h.data_offset = length.value();
  h.data_bytes = file_size - length.value();
  const auto* text = reinterpret_cast<const char*>(head.data() + 8);
  // Parsed into a std::map: an ordered_json inserts each key by linear search, and nlohmann's
  // parser callbacks cost as much again, each quadratic in the tensor count. The header's order and
  // the names it repeats come from a second, SAX pass over its top-level keys.
  const std::string_view json_text(text, length.value() - 8);
  TopLevelKeys keys;
  if (!nlohmann::json::sax_parse(json_text, &keys)) return bad("not valid JSON");
  h.repeated_names = std::move(keys.repeated);
  const nlohmann::json header = nlohmann::json::parse(json_text, nullptr, false);
  if (header.is_discarded()) return bad("not valid JSON");
  if (!header.is_object()) return bad("expected a JSON object");
  for (const std::string& name : keys.order) {
    const nlohmann::json& entry = header.at(name);
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad("expected __metadata__ to be an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return bad("__metadata__ value of '" + key + "' is not a string");
        h.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    Result<SafetensorsEntry> e = parse_entry(name, entry, h.data_bytes);
    if (!e.ok()) return e.status();
    h.entries.push_back(std::move(e).value());
  }
  return h;
}

Status check_data_covered(const SafetensorsHeader& h) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& e : h.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->begin < b->begin; });
  std::uint64_t at = 0;
  for (const SafetensorsEntry* e : sorted) {
    if (e->begin != at) {
      return Status::error("tensor '" + e->name + "' starts at byte " + std::to_string(e->begin) + " of the data, " +
                           (e->begin < at ? "inside the tensor before it" : "after a gap from byte " + std::to_string(at)));
    }
    at = e->end;
  }
  if (at != h.data_bytes) {
    return Status::error("the tensors cover " + std::to_string(at) + " of the data region's " +
                         std::to_string(h.data_bytes) + " bytes (a truncated or padded file)");
  }
  return Status();
}

}  // namespace fp8scope::tensorfile
