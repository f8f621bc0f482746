// The quantized weights of a checkpoint, found by the convention's tensor names and shapes: each
// weight's codes, its scales and the geometry the scales' shape gives (an expert's rows x cols and
// the blocks each scale covers), and the structural findings on the way (a scale missing or
// orphaned, of the wrong dtype or a shape no block size explains, blocks other than declared).
// WeightDecoder then reads one weight's codes and scales in place.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/checkpoint/checkpoint_files.h"
#include "fp8scope/checkpoint/conventions.h"

namespace fp8scope::checkpoint {

enum class Severity : std::uint8_t { kOk, kWarning, kError };
const char* severity_name(Severity s);

struct Finding {
  Severity severity = Severity::kWarning;
  std::string code;     // a short stable name: "missing_scale", "inverted_scale", ...
  std::string message;  // for people
};

// How one scale is stored: a float value (F32, BF16, F16), NVFP4's UE4M3 or MX's E8M0.
enum class ScaleStorage : std::uint8_t { kF32, kBF16, kF16, kUE4M3, kE8M0 };

struct QuantizedWeight {
  std::string module;  // the name without .weight / _blocks
  const CheckpointTensor* codes = nullptr;
  const CheckpointTensor* scale = nullptr;        // null: missing (a finding says so)
  const CheckpointTensor* scale_2 = nullptr;      // NVFP4: the per-tensor factor the block scales multiply
  const CheckpointTensor* input_scale = nullptr;  // the activations' static scale, when exported
  // The element codes' format (float_formats.h's kDataFormats): OCP E4M3 and E5M2 (what GEMMs
  // read), their FNUZ variants, E2M1.
  const FloatFormat* codes_format = &kE4M3;
  ScaleStorage scale_storage = ScaleStorage::kF32;
  std::int64_t experts = 1, rows = 0, cols = 0;  // each expert a rows (out) x cols (in) matrix
  std::int64_t block_rows = 0, block_cols = 0;   // what one scale covers, as the stored shape says
  std::int64_t grid_rows = 0, grid_cols = 0;     // scales per expert
  bool decodable = false;  // the scales' shape fits the codes: values can be read

  std::int64_t numel() const { return experts * rows * cols; }
};

struct Discovery {
  std::vector<QuantizedWeight> weights;
  std::vector<std::pair<std::string, Finding>> findings;  // (tensor or module, finding)
};

// Every quantized weight of the convention, and what is wrong with their structure.
Discovery discover_weights(const CheckpointFiles& files, const Declaration& declaration);

// One weight's codes and scales, mapped: values decoded exactly (code value times its block
// scale, NVFP4's per-tensor factor included), row by row.
class WeightDecoder {
 public:
  // swapped_nibbles: packed FP4 read with element 2j in the high nibble, the order no loader uses
  // (to tell an export written so).
  static Result<WeightDecoder> open(const CheckpointFiles& files, const QuantizedWeight& weight,
                                    bool swapped_nibbles = false);

  const QuantizedWeight& weight() const { return *w_; }
  // Row r of expert e: its codes (unpacked, one a byte), the codes' own values and the values
  // (times their block scales).
  void row(std::int64_t e, std::int64_t r, std::uint8_t* codes, float* code_values, float* values) const;
  // The scale a value is multiplied by for element (r, c) of expert e, and the grid itself.
  float scale_at(std::int64_t e, std::int64_t r, std::int64_t c) const {
    return scales_[grid_index(e, r / w_->block_rows, c / w_->block_cols)];
  }
  std::size_t grid_index(std::int64_t e, std::int64_t gr, std::int64_t gc) const {
    return static_cast<std::size_t>((e * w_->grid_rows + gr) * w_->grid_cols + gc);
  }
  const std::vector<float>& scales() const { return scales_; }           // decoded, per grid cell
  const std::vector<std::uint32_t>& scale_codes() const { return scale_codes_; }  // as stored (F32: bits)
  float scale_2() const { return scale_2_; }  // NVFP4's factor (1 for others)
  // The value of a code of this weight's kind, and whether it is the format's ±max or non-finite.
  float code_value(std::uint8_t code) const { return lut_[code]; }

 private:
  WeightDecoder() = default;
  const QuantizedWeight* w_ = nullptr;
  MappedTensor codes_, scale_;
  std::vector<float> scales_;
  std::vector<std::uint32_t> scale_codes_;
  float scale_2_ = 1.0f;
  bool swapped_nibbles_ = false;
  std::array<float, 256> lut_{};
};

// The value of a code of format f (E2M1: the low nibble), exact; NaN codes give NaN.
float code_value(const FloatFormat& f, std::uint8_t code);
// Codes at the format's ±max.
bool code_at_max(const FloatFormat& f, std::uint8_t code);
// How many grid steps apart two codes of format f are (0 equal, 1 neighbours across zero too).
int code_steps(const FloatFormat& f, std::uint8_t a, std::uint8_t b);

}  // namespace fp8scope::checkpoint
