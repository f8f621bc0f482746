// The narrow interface every statistics engine implements (CPU now, CUDA behind the same call), so
// the daemon and the CLI never know which one ran.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/observed_analysis.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/kernels/stats.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope {

// Which index of a tensor is its channel, whose amax per channel the analysis reports too
// (outlier channels): a column of an activation X (an input feature), a row of a weight W (an
// output feature).
enum class ChannelAxis : std::uint8_t { kNone, kColumns, kRows };

// An activation's channels are its columns (input features), a weight's its rows (output
// features), as stored; a gradient's are not tracked.
ChannelAxis channel_axis_for(Operand operand);

// A tensor in memory the engine can read: rows x cols elements, row-major, cols contiguous. N-d
// tensors are viewed with their last dimension as cols. scale_inv dequantizes FP8 codes.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  float scale_inv = 1.0f;
  ChannelAxis channels = ChannelAxis::kNone;
  // The caller reads none of the moments but the TE amax the scales need: an engine may then
  // leave the rest out (TensorAnalysis::moments holds amax = TE's amax, Inf kept, and no more).
  bool amax_only = false;

  std::int64_t numel() const { return rows * cols; }
};

// How one quantization derives its scales: a recipe's scaling rule, with whatever state it needs.
enum class ScaleRule : std::uint8_t {
  kTensorFixed,    // one given scale (delayed scaling's, or one under study)
  kTensorCurrent,  // one scale from this tensor's amax
  kBlockE8M0,      // MX (MXFP8, MXFP4): E8M0 scale per block from the block amax
  kBlockCurrent,   // current scaling per block (1x128, 128x128)
  kBlockNvfp4,     // NVFP4: a UE4M3 scale per block under an fp32 scale from the tensor's amax
  kBlockNvfp4FourOverSix,  // NVFP4 4over6: per block, the amax mapped to 4 or to 6, whichever errs less
};

struct QuantSpec {
  ScaleRule rule = ScaleRule::kTensorCurrent;
  CastFormat format = CastFormat::kE4M3;
  int block_rows = 0;  // valid_block_rows() for block rules
  int block_cols = 0;  // power of two, 16..4096, for block rules
  bool power_of_2 = false;
  float epsilon = 0.0f;
  float margin = 0.0f;       // current rules: scale = fmax * 2^-margin / amax
  float fixed_scale = 1.0f;  // kTensorFixed only
  bool row_scaled = false;   // kBlockNvfp4 in one-row blocks: each row's amax makes its fp32 scale
  bool stochastic = false;   // stochastic rounding: the counts and sums are their expectation
  // The amax a job's cast used, where it is the cast's input rather than the tensor's own (NVFP4's
  // per-tensor amax, all-reduced across ranks or taken after the Hadamard transform; captured by
  // the hook). NaN: the tensor's own.
  float tensor_amax = __builtin_nanf("");

  bool per_block() const { return rule != ScaleRule::kTensorFixed && rule != ScaleRule::kTensorCurrent; }
};

// The QuantSpec for a (valid) recipe cast to format, for one operand (NVFP4 gives weights 16x16
// blocks). A fixed scale overrides per-tensor recipes: delayed scaling's comes from its amax
// history (DelayedScalingState). Without one, delayed scaling is evaluated at its steady state, the
// scale its history would hold if this tensor's amax repeated: fmax * 2^-margin / amax, TE's
// delayed rule applied to this amax.
Result<QuantSpec> quant_spec_for(const Recipe& recipe, CastFormat format, Operand operand,
                                 std::optional<float> fixed_scale);

// The amax spec's scales come from: its given tensor_amax, else the tensor's TE amax.
inline float spec_amax(const QuantSpec& spec, float tensor_te_amax) {
  return spec.tensor_amax == spec.tensor_amax ? spec.tensor_amax : tensor_te_amax;
}

// A block spec's rule once the tensor's TE amax (NaN skipped, Inf kept) is known: what both
// engines apply to every block amax (scale_rules.h).
BlockRule block_rule_for(const QuantSpec& spec, float tensor_te_amax);

// analyze_recipes splits longer lists into calls of at most this many (each a read of the tensor).
inline constexpr int kMaxSpecsPerCall = 8;

struct TensorAnalysis {
  TensorMoments moments;
  float te_amax = 0.0f;           // what TE's amax kernel would report: +Inf when any Inf is present
  std::vector<QuantStats> quant;  // one per QuantSpec, in order
  // The TE amax (NaN skipped, Inf kept) of each channel of TensorView::channels; empty for kNone.
  std::vector<float> channel_amax;
};

class StatsEngine {
 public:
  virtual ~StatsEngine() = default;
  virtual const char* name() const = 0;
  // Reads the tensor (twice: amax first, then the casts of every spec) and fills *out.
  virtual Status analyze(const TensorView& tensor, std::span<const QuantSpec> specs, TensorAnalysis* out) = 0;
  // What a job's own codes show (observed_analysis.h), computed where this engine computes; the
  // CPU's unless an engine has its own.
  virtual Result<ObservedAnalysis> analyze_observed(const ObservedTensor& tensor) {
    return fp8scope::analyze_observed(tensor);
  }
};

// Checks shared by the engines: a readable, nonempty tensor and specs they can run.
Status check_analysis_request(const TensorView& tensor, std::span<const QuantSpec> specs);

}  // namespace fp8scope
