// One quantized weight checked: what its codes and scales show on their own (non-finite codes,
// codes at ±max, scales out of range or at their format's floor and ceiling, the dequantized
// weight's amax and dynamic range) and, given the reference weights the export came from, the
// dequantized weight against them (MSE, cosine, SQNR, max abs error), the scales against those
// the convention's producer would compute, the codes against its cast of the reference with the
// stored scales, and a diagnosis by name when they differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8scope/checkpoint/checkpoint_files.h"
#include "fp8scope/checkpoint/conventions.h"
#include "fp8scope/checkpoint/quantized_weight.h"

namespace fp8scope::checkpoint {

struct WeightReport {
  std::string module;
  std::string codes_dtype, scale_layout;  // e.g. "F8_E4M3", "128x128 F32"
  std::vector<std::int64_t> shape;        // experts x rows x cols, or rows x cols
  Severity severity = Severity::kOk;
  std::string verdict = "ok";             // "matches", "inverted_scale", "codes_differ", ... (a finding's code)
  std::vector<Finding> findings;

  // The weight alone.
  std::uint64_t numel = 0, nonfinite_codes = 0, codes_at_max = 0;
  double amax = 0, amin = 0, dynamic_range_log2 = 0;  // of the dequantized finite nonzero values
  double scale_min = 0, scale_max = 0;
  std::uint64_t scales = 0, bad_scales = 0, scales_at_floor = 0, scales_at_ceiling = 0;

  // Against the reference (compared = a reference tensor was found and read).
  bool compared = false;
  std::string reference;
  double mse = 0, cosine = 0, sqnr_db = 0, max_abs_error = 0, relative_error = 0;
  std::uint64_t codes_differing = 0;    // not the producer's cast of the reference (its scales, its rounding)
  std::uint64_t codes_off_by_more = 0;  // more than one step from that cast under the stored scales
  std::uint64_t scales_differing = 0;   // not the producer's scales of the reference

  void add(Finding f);  // raises the severity; the first error (else warning) names the verdict
};

// Reads the weight once (and the reference twice: its block amaxes, then element by element).
WeightReport check_weight(const CheckpointFiles& files, const QuantizedWeight& weight, const Declaration& declaration,
                          const CheckpointFiles* reference);

}  // namespace fp8scope::checkpoint
