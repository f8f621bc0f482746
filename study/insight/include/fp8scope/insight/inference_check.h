// The first thing to rule out when training's loss is fine but an FP8 inference job scores worse:
// does inference use the weights training produced, cast the way training would cast them? For
// every forward weight the inference run captured in FP8, its scale (1/scale_inv, as the GEMM
// used it) against the scale training ended with, and its codes against the trained weight's
// codes under that scale (by code_digest fingerprints); and, per layer, how far FP8 GEMM outputs
// fall from the high-precision ones wherever the daemon's GEMM check saw a pair captured in BF16.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

enum class WeightVerdict { kMatches, kScaleDiffers, kCodesDiffer, kFormatDiffers, kNotInTraining, kNotComparable };
const char* weight_verdict_name(WeightVerdict v);

struct WeightCheck {
  TensorKey tensor;
  std::uint64_t step = 0, training_step = 0;  // the latest capture of each side
  const FloatFormat* format = nullptr;           // the codes' format on each side (null: none)
  const FloatFormat* training_format = nullptr;
  double scale = 0;                    // what inference multiplies by (1 / its scale_inv)
  double training_scale = 0;           // what training ended with
  // What cast training's side: the job (trained in FP8) or tensor_current (trained in BF16).
  std::optional<Caster> training_source;
  WeightVerdict verdict = WeightVerdict::kNotComparable;
  std::string detail;
};

struct OutputCheck {
  std::string layer, accumulate;  // accumulate: fast, precise or emulated (the GEMM check's)
  double run_cosine = 0, run_mse = 0, training_cosine = 0, training_mse = 0;  // medians; NaN = not captured
};

struct InferenceCheck {
  std::string run, training;
  std::vector<WeightCheck> weights;  // flagged first
  std::vector<OutputCheck> outputs;
  std::size_t flagged = 0;           // weights whose scale, format or codes differ
};

// Scales within this relative difference are the same scale (1/scale_inv round trips in fp32).
inline constexpr double kScaleTolerance = 1e-5;

// Nothing when the inference run captured no FP8 forward weight, or any backward GEMM (then it is
// a training run, and its weights are not meant to be the baseline's).
std::optional<InferenceCheck> check_inference(const RunRecords& inference, const RunRecords& training);

}  // namespace fp8scope::insight
