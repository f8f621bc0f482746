// A job's own cast held against the high-precision tensor it came from (Transformer Engine's
// casts, captured by the hook: DESIGN.md "The casts"). Two things come of it:
//  - the run's own error of that cast: underflow, MSE, cosine and SQNR of the values the job's
//    codes decode to, against the tensor they were cast from;
//  - a live check of fp8scope's model of the job's recipe: the daemon casts the same tensor with
//    the same recipe, scale and amax (scale_rules.h) and compares, code for code and block scale for
//    block scale, with the job's.
// Every tensor here is K-major: rows x cols, a block runs along a row (cols contiguous).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fp8scope/kernels/stats.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

// A cast's result element by element: each element's code (E2M1 too, one a byte) and the scale
// its block stores (decoded: E8M0 2^e, UE4M3's value, fp32 as is; per tensor the one scale_inv;
// NVFP4's without its per-tensor factor, which the rule holds).
struct CastElements {
  std::vector<std::uint8_t> codes;
  std::vector<float> stored_scales;
};

// A job's codes and their block scales element by element, K-major: as stored, or transposed when
// K runs along the stored rows (t.shape.k_is_outer). NVFP4's per-tensor factor (t.scale_inv) is
// left out, as CastElements says.
Result<CastElements> observed_elements(const ObservedTensor& t);

// spec's cast of t (fp32, K-major) as TE's kernels make it: per tensor with spec's fixed or current
// scale, or in blocks along the rows, NVFP4 under spec.tensor_amax when given, 4over6 picking in
// TE's order. Nothing for stochastic rounding, whose codes are random draws, or a tensor not fp32.
std::optional<CastElements> model_cast(const TensorView& t, const QuantSpec& spec);

struct CastCheck {
  // The run's own statistics of the cast: underflow, saturation and the error sums from the job's
  // codes; overflow, the histogram and the scales from the model (the scales TE's rules give).
  QuantStats stats;
};

// hp: the high-precision tensor (fp32, K-major); job: its codes and block scales as the job wrote
// them, laid out the same; model: the engine's statistics of spec on hp. The code check's counts
// go into stats.code_mismatches and stats.codes_compared (0 compared: stochastic rounding).
CastCheck check_cast(const TensorView& hp, const CastElements& job, const QuantSpec& spec, const QuantStats& model);

}  // namespace fp8scope
