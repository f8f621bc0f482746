#include "fp8scope/checkpoint/quantized_weight.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_cast.h"

namespace fp8scope::checkpoint {
namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return b <= 0 ? 0 : (a + b - 1) / b; }

Finding error(std::string code, std::string message) { return {Severity::kError, std::move(code), std::move(message)}; }

// The FP8 formats (OCP and FNUZ) a weight's codes may be stored in, from the dtype's row.
const FloatFormat* fp8_format(const tensorfile::SafetensorsDtype& dtype) {
  return dtype.codes != nullptr && code_bits(*dtype.codes) == 8 ? dtype.codes : nullptr;
}

std::optional<ScaleStorage> float_storage(const std::string& dtype) {
  if (dtype == "F32") return ScaleStorage::kF32;
  if (dtype == "BF16") return ScaleStorage::kBF16;
  if (dtype == "F16") return ScaleStorage::kF16;
  return std::nullopt;
}

// The block extent along a dimension of n elements that `cells` scales cover: n itself for one,
// else the power of two (16 to 4096) whose ceil-division gives cells, else exactly n / cells.
std::optional<std::int64_t> block_extent(std::int64_t n, std::int64_t cells) {
  if (cells == 1) return n;
  if (cells == n) return 1;
  for (std::int64_t b = 16; b <= 4096; b *= 2) {
    if (ceil_div(n, b) == cells) return b;
  }
  if (cells > 0 && n % cells == 0) return n / cells;
  return std::nullopt;
}

struct Found {
  Discovery& out;
  void add(const std::string& where, Finding f) { out.findings.emplace_back(where, std::move(f)); }
};

// The geometry an FP8 weight's float scales give, checked against the declared block.
void fp8_geometry(QuantizedWeight& w, const Declaration& d, Found& found) {
  const std::vector<std::int64_t>& s = w.scale->entry.shape;
  const std::int64_t n = w.scale->entry.numel();
  // With the declared block known, a grid of the transposed weight is named before any reading of it.
  const bool declared_2d = d.block.size() == 2;
  const std::int64_t want_r = declared_2d && d.block[0] > 0 ? d.block[0] : w.rows;
  const std::int64_t want_c = declared_2d && d.block[1] > 0 ? d.block[1] : w.cols;
  const std::string declared = std::to_string(want_r) + "x" + std::to_string(want_c);
  const bool right_grid = s.size() == 2 && s[0] == ceil_div(w.rows, want_r) && s[1] == ceil_div(w.cols, want_c);
  if (declared_2d && !right_grid && s.size() == 2 && s[0] == ceil_div(w.cols, want_c) && s[1] == ceil_div(w.rows, want_r)) {
    found.add(w.module, error("transposed_scales", w.scale->name + " is " + shape_text(s) + ": the " + declared +
                                                       " grid of the transposed weight [in, out], not [out, in]"));
    return;
  }
  std::optional<std::int64_t> br, bc;
  if (n == 1) {
    br = w.rows, bc = w.cols;
  } else if ((s.size() == 1 && s[0] == w.rows) || (s.size() == 2 && s[0] == w.rows && s[1] == 1)) {
    br = 1, bc = w.cols;
  } else if (s.size() == 2) {
    br = block_extent(w.rows, s[0]);
    bc = block_extent(w.cols, s[1]);
  }
  if (!br || !bc) {
    found.add(w.module, error("scale_shape", w.scale->name + " is " + shape_text(s) + ": no block size of the " +
                                                 shape_text({w.rows, w.cols}) + " weight gives that grid"));
    return;
  }
  w.block_rows = *br, w.block_cols = *bc;
  w.grid_rows = ceil_div(w.rows, w.block_rows), w.grid_cols = ceil_div(w.cols, w.block_cols);
  w.decodable = true;
  if (!declared_2d || (want_r == w.block_rows && want_c == w.block_cols)) return;
  found.add(w.module, error("block_size", w.scale->name + " holds one scale per " + std::to_string(w.block_rows) + "x" +
                                              std::to_string(w.block_cols) + " elements; the config declares " +
                                              declared + " (" + d.why + ")"));
}

void nvfp4_geometry(QuantizedWeight& w, const CheckpointFiles& files, const Declaration& d, Found& found) {
  w.scale_2 = files.find(w.module + ".weight_scale_2");
  if (w.scale_2 == nullptr || w.scale_2->entry.numel() != 1 || std::string(w.scale_2->entry.dtype->name) != "F32") {
    found.add(w.module, error("missing_scale", w.module + ".weight_scale_2 (one F32, NVFP4's per-tensor factor) is " +
                                                   (w.scale_2 == nullptr ? "missing" : "not one F32 value")));
    return;
  }
  if (std::string(w.scale->entry.dtype->name) != "F8_E4M3") {
    found.add(w.module, error("scale_dtype", w.scale->name + " is " + w.scale->entry.dtype->name +
                                                 "; NVFP4 block scales are F8_E4M3 (UE4M3)"));
    return;
  }
  w.scale_storage = ScaleStorage::kUE4M3;
  const std::int64_t group = d.block.size() == 2 && d.block[1] > 0 ? d.block[1] : 16;
  const std::vector<std::int64_t>& s = w.scale->entry.shape;
  if (s.size() != 2 || s[0] != w.rows || s[1] != ceil_div(w.cols, group)) {
    const bool transposed = s.size() == 2 && s[1] == w.rows && s[0] == ceil_div(w.cols, group);
    found.add(w.module, error(transposed ? "transposed_scales" : "block_size",
                              w.scale->name + " is " + shape_text(s) + "; 1x" + std::to_string(group) + " blocks of the " +
                                  shape_text({w.rows, w.cols}) + " weight take " +
                                  shape_text({w.rows, ceil_div(w.cols, group)}) + (transposed ? " (it is transposed)" : "")));
    return;
  }
  w.block_rows = 1, w.block_cols = group, w.grid_rows = w.rows, w.grid_cols = s[1];
  w.decodable = true;
}

// gpt-oss: P_blocks U8 [..., out, G, 16] and P_scales U8 [..., out, G] (weights.py:86-88).
// The [out, in] a gpt-oss expert weight is read in from config.json's dimensions (gpt_oss/torch/
// model.py MLPBlock: mlp1_weight [E, 2 intermediate, hidden], mlp2_weight [E, hidden, intermediate];
// transformers mxfp4.py names them gate_up_proj and down_proj), or nullopt for another name or
// without the dimensions.
std::optional<std::pair<std::int64_t, std::int64_t>> gpt_oss_expected(const Declaration& d, const std::string& module) {
  if (d.hidden_size <= 0 || d.intermediate_size <= 0) return std::nullopt;
  if (ends_with(module, "gate_up_proj")) return std::make_pair(2 * d.intermediate_size, d.hidden_size);
  if (ends_with(module, "down_proj")) return std::make_pair(d.hidden_size, d.intermediate_size);
  return std::nullopt;
}

void mxfp4_weight(const CheckpointFiles& files, const Declaration& d, const CheckpointTensor& blocks, Discovery& out,
                  Found& found) {
  QuantizedWeight w;
  w.module = blocks.name.substr(0, blocks.name.size() - 7);
  w.codes = &blocks;
  w.codes_format = &kE2M1;
  w.scale = files.find(w.module + "_scales");
  w.scale_storage = ScaleStorage::kE8M0;
  const std::vector<std::int64_t>& b = blocks.entry.shape;
  if (b.size() < 3 || b.back() != 16) {
    found.add(w.module, error("codes_shape", blocks.name + " is " + shape_text(b) + "; expected [..., out, blocks, 16]"));
    return;
  }
  const std::vector<std::int64_t> want(b.begin(), b.end() - 1);
  if (w.scale == nullptr || w.scale->entry.shape != want || std::string(w.scale->entry.dtype->name) != "U8") {
    found.add(w.module, error(w.scale == nullptr ? "missing_scale" : "scale_shape",
                              w.module + "_scales " + (w.scale == nullptr ? "is missing" : "is " + shape_text(w.scale->entry.shape) + " " +
                                                                               w.scale->entry.dtype->name) +
                                  "; expected U8 " + shape_text(want)));
    out.weights.push_back(w);
    return;
  }
  for (std::size_t i = 0; i + 3 < b.size(); ++i) w.experts *= b[i];
  w.rows = b[b.size() - 3];
  w.cols = b[b.size() - 2] * 32;
  // The loader's orientation before any value: [in, out] blocks can even match a reference read the
  // same wrong way round, and every engine still reads them wrong.
  if (const auto want = gpt_oss_expected(d, w.module); want && (w.rows != want->first || w.cols != want->second)) {
    const bool transposed = w.rows == want->second && w.cols == want->first;
    found.add(w.module, error(transposed ? "transposed_weight" : "codes_shape",
                              blocks.name + " holds [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                                  "] per expert; config.json (hidden_size " + std::to_string(d.hidden_size) +
                                  ", intermediate_size " + std::to_string(d.intermediate_size) +
                                  ") makes the loader read [" + std::to_string(want->first) + ", " +
                                  std::to_string(want->second) + "] (out, in)" + (transposed ? ": stored transposed" : "")));
    out.weights.push_back(w);
    return;
  }
  w.block_rows = 1, w.block_cols = 32, w.grid_rows = w.rows, w.grid_cols = b[b.size() - 2];
  w.decodable = true;
  out.weights.push_back(w);
}

// Scale `at` of a tensor of scales stored so, and its code as stored (F32: its bits).
float stored_scale(ScaleStorage storage, const std::uint8_t* raw, std::size_t at, std::uint32_t* code) {
  float v = 0;
  switch (storage) {
    case ScaleStorage::kF32: std::memcpy(&v, raw + 4 * at, 4), *code = float_bits(v); break;
    case ScaleStorage::kBF16: *code = static_cast<std::uint32_t>(raw[2 * at] | raw[2 * at + 1] << 8), v = bf16_to_float(static_cast<std::uint16_t>(*code)); break;
    case ScaleStorage::kF16: *code = static_cast<std::uint32_t>(raw[2 * at] | raw[2 * at + 1] << 8), v = half_to_float(static_cast<std::uint16_t>(*code)); break;
    case ScaleStorage::kUE4M3: *code = raw[at], v = decode_ue4m3(raw[at]); break;
    case ScaleStorage::kE8M0: *code = raw[at], v = decode_e8m0(raw[at]); break;
  }
  return v;
}

// The activation scale a static scheme needs beside each quantized layer: present, one value, and a
// usable one (finite, > 0).
void check_input_scale(const CheckpointFiles& files, const QuantizedWeight& w, const Declaration& d, Found& found) {
  const std::string name = w.module + ".input_scale";
  if (w.input_scale == nullptr) {
    found.add(w.module, error("missing_input_scale", name + " is missing: the config declares static activation "
                                                            "scales (" + d.activations_why + "), which the loader reads "
                                                            "per layer; without it the activations are cast with its "
                                                            "placeholder or the load fails"));
    return;
  }
  const std::optional<ScaleStorage> storage = float_storage(w.input_scale->entry.dtype->name);
  if (w.input_scale->entry.numel() != 1 || !storage) {
    found.add(w.module, error("input_scale_shape", name + " is " + w.input_scale->entry.dtype->name + " " +
                                                       shape_text(w.input_scale->entry.shape) +
                                                       "; a static activation scale is one F32, BF16 or F16 value"));
    return;
  }
  Result<MappedTensor> m = files.map(*w.input_scale);
  if (!m.ok()) {
    found.add(w.module, error("unreadable", m.message()));
    return;
  }
  std::uint32_t code = 0;
  const float v = stored_scale(*storage, m.value().bytes().data(), 0, &code);
  if (!(std::isfinite(v) && v > 0.0f)) {
    found.add(w.module, error("bad_input_scale", name + " is " + std::to_string(v) +
                                                     ": a static activation scale must be finite and > 0"));
  }
}

// An FP8 or NVFP4 weight: M.weight with its scales.
void weight_with_scales(const CheckpointFiles& files, const Declaration& d, const CheckpointTensor& codes,
                        Discovery& out, Found& found) {
  QuantizedWeight w;
  w.module = codes.name.substr(0, codes.name.size() - 7);
  w.codes = &codes;
  const std::string dtype = codes.entry.dtype->name;
  const bool nvfp4 = d.convention == Convention::kModelOptNvfp4;
  if (nvfp4) {
    w.codes_format = &kE2M1;
  } else {
    w.codes_format = fp8_format(*codes.entry.dtype);
    if (w.codes_format->non_finite == NonFiniteEncoding::kNegativeZeroNan) {
      found.add(w.module, error("e4m3_variant", codes.name + " is " + dtype + " (bias " +
                                                    std::to_string(w.codes_format->bias) +
                                                    ", one NaN): GEMMs read OCP E4M3/E5M2, so every value is "
                                                    "read at twice its size"));
    }
  }
  const std::vector<std::int64_t>& shape = codes.entry.shape;
  if (shape.size() < 2) {
    found.add(w.module, error("codes_shape", codes.name + " is " + shape_text(shape) + "; expected [out, in]"));
    return;
  }
  for (std::size_t i = 0; i + 2 < shape.size(); ++i) w.experts *= shape[i];
  w.rows = shape[shape.size() - 2];
  w.cols = shape.back() * (nvfp4 && dtype == "U8" ? 2 : 1);
  const char* scale_name = d.convention == Convention::kDeepSeekBlockFp8 ? ".weight_scale_inv" : ".weight_scale";
  const char* other_name = d.convention == Convention::kDeepSeekBlockFp8 ? ".weight_scale" : ".weight_scale_inv";
  w.scale = files.find(w.module + scale_name);
  w.input_scale = files.find(w.module + ".input_scale");
  if (d.static_activations) check_input_scale(files, w, d, found);
  if (w.scale == nullptr) {
    const bool misnamed = files.find(w.module + other_name) != nullptr;
    found.add(w.module, error("missing_scale", w.module + scale_name + " is missing" +
                                                   (misnamed ? std::string(" (there is a ") + other_name + ", which " +
                                                                   convention_info(d.convention).name + " loaders do not read)"
                                                             : std::string(": the loader keeps its placeholder scale"))));
    out.weights.push_back(w);
    return;
  }
  if (nvfp4) {
    nvfp4_geometry(w, files, d, found);
  } else if (const std::optional<ScaleStorage> storage = float_storage(w.scale->entry.dtype->name)) {
    w.scale_storage = *storage;
    if (w.experts == 1) fp8_geometry(w, d, found);
  } else {
    found.add(w.module, error("scale_dtype", w.scale->name + " is " + w.scale->entry.dtype->name +
                                                 "; FP8 weight scales are F32, BF16 or F16 values"));
  }
  out.weights.push_back(w);
}

bool is_scale_name(const std::string& n) {
  return ends_with(n, ".weight_scale") || ends_with(n, ".weight_scale_inv") || ends_with(n, ".weight_scale_2") ||
         ends_with(n, ".input_scale") || ends_with(n, "_scales");
}

}  // namespace

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kOk: return "ok";
    case Severity::kWarning: return "warning";
    case Severity::kError: return "error";
  }
  return "?";
}

Discovery discover_weights(const CheckpointFiles& files, const Declaration& d) {
  Discovery out;
  Found found{out};
  std::set<std::string> used;
  for (const CheckpointTensor& t : files.tensors()) {
    const std::string dtype = t.entry.dtype->name;
    if (d.convention == Convention::kGptOssMxfp4) {
      if (ends_with(t.name, "_blocks") && dtype == "U8") mxfp4_weight(files, d, t, out, found);
    } else if (ends_with(t.name, ".weight") &&
               (d.convention == Convention::kModelOptNvfp4 ? dtype == "U8" || dtype == "F4" : fp8_format(*t.entry.dtype) != nullptr)) {
      weight_with_scales(files, d, t, out, found);
    }
  }
  for (const QuantizedWeight& w : out.weights) {
    for (const CheckpointTensor* t : {w.scale, w.scale_2, w.input_scale}) {
      if (t != nullptr) used.insert(t->name);
    }
  }
  for (const CheckpointTensor& t : files.tensors()) {
    if (is_scale_name(t.name) && !used.count(t.name)) {
      found.add(t.name, error("orphaned_scale", t.name + " belongs to no quantized weight of this checkpoint"));
    }
  }
  return out;
}

float code_value(const FloatFormat& f, std::uint8_t code) {
  return decode_as(f, static_cast<std::uint8_t>(code & ((1 << code_bits(f)) - 1)));
}

bool code_at_max(const FloatFormat& f, std::uint8_t code) { return (code & magnitude_mask(f)) == max_code(f); }

int code_steps(const FloatFormat& f, std::uint8_t a, std::uint8_t b) {
  const int sign = sign_mask(f);
  const auto signed_index = [&](std::uint8_t c) { return (c & sign) ? -(c & (sign - 1)) : (c & (sign - 1)); };
  const int d = signed_index(a) - signed_index(b);
  return d < 0 ? -d : d;
}

Result<WeightDecoder> WeightDecoder::open(const CheckpointFiles& files, const QuantizedWeight& w, bool swapped_nibbles) {
  if (!w.decodable) return Status::error(w.module + ": its scales do not fit its codes; values cannot be read");
  WeightDecoder dec;
  dec.w_ = &w;
  dec.swapped_nibbles_ = swapped_nibbles;
  for (int c = 0; c < 256; ++c) dec.lut_[static_cast<std::size_t>(c)] = checkpoint::code_value(*w.codes_format, static_cast<std::uint8_t>(c));
  Result<MappedTensor> codes = files.map(*w.codes);
  if (!codes.ok()) return codes.status();
  dec.codes_ = std::move(codes).value();
  Result<MappedTensor> scale = files.map(*w.scale);
  if (!scale.ok()) return scale.status();
  dec.scale_ = std::move(scale).value();
  if (w.scale_2 != nullptr) {
    Result<MappedTensor> s2 = files.map(*w.scale_2);
    if (!s2.ok()) return s2.status();
    std::memcpy(&dec.scale_2_, s2.value().bytes().data(), sizeof(float));
  }
  const std::size_t cells = static_cast<std::size_t>(w.experts * w.grid_rows * w.grid_cols);
  const std::uint8_t* raw = dec.scale_.bytes().data();
  const bool one = w.scale->entry.numel() == 1;
  for (std::size_t i = 0; i < cells; ++i) {
    const std::size_t at = one ? 0 : i;
    std::uint32_t code = 0;
    float v = stored_scale(w.scale_storage, raw, at, &code);
    if (w.scale_storage == ScaleStorage::kUE4M3) v = mul_rn(v, dec.scale_2_);  // NVFP4's per-tensor factor
    dec.scales_.push_back(v);
    dec.scale_codes_.push_back(code);
  }
  return dec;
}

void WeightDecoder::row(std::int64_t e, std::int64_t r, std::uint8_t* codes, float* code_values, float* values) const {
  const QuantizedWeight& w = *w_;
  const std::uint8_t* base = codes_.bytes().data();
  const std::int64_t index = (e * w.rows + r) * w.cols;  // elements
  const auto n = static_cast<std::size_t>(w.cols);
  // Element i's nibble; swapped, its byte's other one.
  const std::size_t flip = swapped_nibbles_ ? 1 : 0;
  if (w.codes_format == &kE2M1 && index % 2 == 0) {  // two codes a byte, the low nibble first
    const std::uint8_t* packed = base + index / 2;
    const int low = swapped_nibbles_ ? 4 : 0, high = 4 - low;
    for (std::size_t c = 0; c + 1 < n; c += 2) {
      codes[c] = (packed[c / 2] >> low) & 0x0F;
      codes[c + 1] = (packed[c / 2] >> high) & 0x0F;
    }
    if (n % 2) codes[n - 1] = fp4_code(base, (static_cast<std::size_t>(index) + n - 1) ^ flip);
  } else if (w.codes_format == &kE2M1) {  // an odd row length: rows start mid-byte
    for (std::size_t c = 0; c < n; ++c) codes[c] = fp4_code(base, (static_cast<std::size_t>(index) + c) ^ flip);
  } else {
    std::memcpy(codes, base + index, n);
  }
  for (std::size_t c = 0; c < n; ++c) code_values[c] = lut_[codes[c]];
  const float* grid = scales_.data() + grid_index(e, r / w.block_rows, 0);
  for (std::int64_t c0 = 0; c0 < w.cols; c0 += w.block_cols) {
    const float s = grid[c0 / w.block_cols];
    for (std::int64_t c = c0; c < std::min(c0 + w.block_cols, w.cols); ++c) values[c] = mul_rn(code_values[c], s);
  }
}

}  // namespace fp8scope::checkpoint
