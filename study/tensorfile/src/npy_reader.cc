// NumPy .npy, format versions 1.0-3.0 (numpy/lib/format.py): magic "\x93NUMPY", version, a
// little-endian header length (2 bytes in v1, 4 in v2/v3), then a Python dict literal
// {'descr': ..., 'fortran_order': ..., 'shape': (...)} and the raw elements.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <string_view>

#include "parsed_file.h"

namespace fp8scope::tensorfile {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// A reader for the small Python literal subset np.save writes: strings, True/False, integers
// (with Python 2's L suffix), tuples, and the one dict.
class LiteralParser {
 public:
  explicit LiteralParser(std::string_view text) : s_(text) {}

  Result<NpyHeader> header() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    if (!eat('{')) return fail("expected '{' at the start of the header");
    while (true) {
      skip_space();
      if (eat('}')) break;
      std::string key;
      if (!string(&key)) return fail("expected a quoted key in the header");
      if (!eat(':')) return fail("expected ':' after '" + key + "'");
      if (key == "descr") {
        if (!string(&h.descr)) return fail("expected 'descr' to be a string (structured dtypes are not supported)");
        have_descr = true;
      } else if (key == "fortran_order") {
        if (!boolean(&h.fortran_order)) return fail("expected 'fortran_order' to be True or False");
        have_order = true;
      } else if (key == "shape") {
        if (!tuple(&h.shape)) return fail("expected 'shape' to be a tuple of integers");
        have_shape = true;
      } else {
        return fail("unexpected header key '" + key + "'");
      }
      skip_space();
      if (eat(',')) continue;
      if (eat('}')) break;
      return fail("expected ',' or '}' in the header");
    }
    if (!have_descr || !have_order || !have_shape) return fail("expected 'descr', 'fortran_order' and 'shape' keys");
    return h;
  }

 private:
  Status fail(const std::string& what) const { return Status::error("bad .npy header: " + what); }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool string(std::string* out) {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
    const char quote = s_[pos_++];
    const std::size_t end = s_.find(quote, pos_);
    if (end == std::string_view::npos) return false;
    *out = std::string(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  bool boolean(bool* out) {
    skip_space();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        *out = value;
        return true;
      }
    }
    return false;
  }
  bool integer(std::int64_t* out) {
    skip_space();
    const std::size_t start = pos_;
    std::int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      if (v > (INT64_MAX - 9) / 10) return false;
      v = v * 10 + (s_[pos_++] - '0');
    }
    if (pos_ == start) return false;
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 long
    *out = v;
    return true;
  }
  bool tuple(std::vector<std::int64_t>* out) {
    if (!eat('(')) return false;
    while (true) {
      if (eat(')')) return true;
      std::int64_t v;
      if (!integer(&v)) return false;
      out->push_back(v);
      if (eat(',')) continue;
      return eat(')');
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

struct NpyElement {
  std::optional<DType> dtype;
  int bytes = 0;
  bool big_endian = false;
  std::string skip_reason;
};

NpyElement element_of(const std::string& descr, const ReadOptions& options) {
  NpyElement e;
  if (descr.size() < 3) return e;
  const char order = descr[0];
  const char kind = descr[1];
  e.bytes = std::atoi(descr.c_str() + 2);
  e.big_endian = order == '>' && e.bytes > 1;
  if (order != '<' && order != '>' && order != '|' && order != '=') e.bytes = 0;
  if (e.bytes <= 0) return e;
  if (kind == 'f' && e.bytes == 4) e.dtype = DType::kF32;
  if (kind == 'f' && e.bytes == 8) e.dtype = DType::kF64;
  if (kind == 'f' && e.bytes == 2) e.dtype = DType::kF16;
  const bool raw = (kind == 'V' || kind == 'u') && (e.bytes == 1 || e.bytes == 2);
  // FP4 codes come two a byte: '|u1' bytes of packed E2M1 pairs.
  const int raw_bytes = options.npy_raw_dtype ? (dtype_bits(*options.npy_raw_dtype) + 7) / 8 : 0;
  if (raw && options.npy_raw_dtype && raw_bytes == e.bytes) e.dtype = options.npy_raw_dtype;
  if (e.dtype) return e;
  if (raw) {
    e.skip_reason = e.bytes == 2 ? "raw 16-bit elements: pass --dtype bf16 if they are bfloat16 bits"
                                 : "raw 8-bit elements: pass --dtype e4m3 or e5m2 if they are FP8 codes, e2m1 if "
                                   "they are packed FP4 codes";
  } else if (kind == 'i' || kind == 'u') {
    e.skip_reason = "integer tensor";
  } else if (kind == 'b') {
    e.skip_reason = "boolean tensor";
  } else {
    e.skip_reason = "element type '" + descr + "' is not a floating-point type fp8scope reads";
  }
  return e;
}

// Fortran order to C order: element (i0, ..., ik) sits at column-major offset Σ i_j * Π_{m<j} d_m.
std::vector<std::uint8_t> fortran_to_c(std::span<const std::uint8_t> in, const std::vector<std::int64_t>& shape,
                                       int bytes) {
  std::vector<std::uint8_t> out(in.size());
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> index(rank, 0), f_stride(rank, 1);
  for (std::size_t j = 1; j < rank; ++j) f_stride[j] = f_stride[j - 1] * shape[j - 1];
  const std::size_t n = in.size() / static_cast<std::size_t>(bytes);
  for (std::size_t c = 0; c < n; ++c) {
    std::int64_t f = 0;
    for (std::size_t j = 0; j < rank; ++j) f += index[j] * f_stride[j];
    std::memcpy(&out[c * bytes], &in[static_cast<std::size_t>(f) * bytes], static_cast<std::size_t>(bytes));
    for (std::size_t j = rank; j-- > 0;) {  // advance the C-order index, last dimension fastest
      if (++index[j] < shape[j]) break;
      index[j] = 0;
    }
  }
  return out;
}

}  // namespace

Status parse_npy(std::span<const std::uint8_t> file, const std::string& name, const ReadOptions& options,
                 ParsedFile* out) {
  if (file.size() < 10 || std::memcmp(file.data(), kMagic.data(), kMagic.size()) != 0) {
    return Status::error("not a .npy file (expected the magic \\x93NUMPY)");
  }
  const int major = file[6];
  std::size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = file[8] | (static_cast<std::size_t>(file[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return Status::error("truncated .npy header");
    header_len = file[8] | (static_cast<std::size_t>(file[9]) << 8) | (static_cast<std::size_t>(file[10]) << 16) |
                 (static_cast<std::size_t>(file[11]) << 24);
    header_at = 12;
  } else {
    return Status::error("expected .npy format version 1, 2 or 3, got " + std::to_string(major));
  }
  if (header_at + header_len > file.size()) {
    return Status::error("truncated .npy header: expected " + std::to_string(header_len) + " header bytes, file has " +
                         std::to_string(file.size() - header_at));
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data() + header_at), header_len);
  Result<NpyHeader> header = LiteralParser(text).header();
  if (!header.ok()) return header.status();
  const NpyHeader& h = header.value();

  FileTensor t;
  t.name = name;
  t.file_dtype = h.descr;
  t.shape = h.shape;
  const NpyElement e = element_of(h.descr, options);
  if (e.bytes <= 0) return Status::error("bad .npy header: cannot read element type '" + h.descr + "'");
  Result<std::int64_t> numel = checked_numel(h.shape);
  if (!numel.ok()) return numel.status();
  const std::size_t data_at = header_at + header_len;
  const auto expected = static_cast<std::uint64_t>(numel.value()) * static_cast<std::uint64_t>(e.bytes);
  const std::uint64_t present = file.size() - data_at;
  if (present != expected) {
    return Status::error(std::string(present < expected ? "truncated" : "trailing bytes") + ": shape x dtype is " +
                         std::to_string(expected) + " bytes of data, the file has " + std::to_string(present));
  }
  t.bytes = file.subspan(data_at, expected);
  t.dtype = e.dtype;
  t.skip_reason = e.skip_reason;
  if (t.dtype == DType::kE2M1) {  // the file's bytes hold two codes each: the logical last dimension doubles
    if (h.fortran_order && h.shape.size() > 1) return Status::error("packed FP4 codes: expected C order");
    if (t.shape.empty()) t.shape.push_back(1);
    t.shape.back() *= 2;
  }
  if (t.dtype && (h.fortran_order || e.big_endian)) {
    std::vector<std::uint8_t> copy(t.bytes.begin(), t.bytes.end());
    if (e.big_endian) {
      for (std::size_t i = 0; i < copy.size(); i += static_cast<std::size_t>(e.bytes)) {
        std::reverse(copy.begin() + static_cast<std::ptrdiff_t>(i), copy.begin() + static_cast<std::ptrdiff_t>(i) + e.bytes);
      }
    }
    if (h.fortran_order && h.shape.size() > 1) copy = fortran_to_c(copy, h.shape, e.bytes);
    out->owned.push_back(std::move(copy));
    t.bytes = out->owned.back();
  }
  out->tensors.push_back(std::move(t));
  return Status();
}

}  // namespace fp8scope::tensorfile
