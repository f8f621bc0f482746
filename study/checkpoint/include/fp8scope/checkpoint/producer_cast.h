// What the convention's producer writes for a reference weight: its scale for a block of given
// amax (and NVFP4's per-tensor factor), and its code for an element under a given scale, each
// rounding where that producer rounds (conventions.h, ProducerCast). "Codes equal the reference
// cast" and "scales equal the producer's" hold exactly for an export that producer made.
#pragma once

#include <cstdint>

#include "fp8scope/checkpoint/conventions.h"
#include "fp8scope/checkpoint/quantized_weight.h"

namespace fp8scope::checkpoint {

struct ExpectedScale {
  float value = 0;         // what the codes are multiplied by (NVFP4: times the per-tensor factor)
  std::uint32_t code = 0;  // as stored: F32/BF16/F16 bits, UE4M3 or E8M0 code
  bool known = true;       // false where the producer's choice is not documented (DeepSeek's all-zero blocks)
};

// NVFP4's per-tensor factor, weight_scale_2 = amax / (6 * 448) (ModelOpt nvfp4_tensor.py:56-60).
float nvfp4_scale_2(float tensor_amax);

// The scale of a block whose amax is `amax` (scale_2: NVFP4's factor the block scale is relative to).
ExpectedScale expected_scale(const QuantizedWeight& w, Convention c, float amax, float scale_2);

// The code of reference value x under the stored scale value s.
std::uint8_t producer_code(const QuantizedWeight& w, Convention c, float x, float s);

// The same cast for a row of n values, blocks of `block` sharing a scale (scales[c / block]),
// as the codes' signed values (decode of producer_code, -0 kept; NaN for NaN x): compared with
// the stored codes' values it tells equal codes, in loops the compiler vectorizes
// (round_to_grid, float_cast.h).
void producer_values(const QuantizedWeight& w, Convention c, const float* x, const float* scales, std::int64_t block,
                     std::int64_t n, float* out);

}  // namespace fp8scope::checkpoint
