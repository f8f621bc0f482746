// What to do about each tensor of a run: a risk score and one recommendation, from its sampled
// statistics (what current and delayed scaling do to it), the attribution of the run's loss
// spikes, and a replay of its amax series. The thresholds are data (advice_thresholds()), so the
// table, the tests and the documentation read the same numbers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fp8scope/insight/amax_replay.h"
#include "fp8scope/insight/attribution.h"
#include "fp8scope/insight/expert_summary.h"
#include "fp8scope/insight/recipe_ladder.h"
#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

enum class Recommendation {
  kKeepFp8,
  kCurrentScaling,   // delayed scaling's scale lags this tensor's amax: scale it from its own amax
  kTuneDelayed,      // keep delayed scaling with the replay's amax_history_len and margin
  kE5m2ForDy,        // the gradient spans more binades than E4M3 holds
  kFinerRecipe,      // the job's FP4 recipe loses too much, MXFP8 would not: cast this tensor in MXFP8
  kFallBackToBf16,   // even current scaling (or the job's block recipe) loses too much: run this GEMM in BF16
};
const char* recommendation_name(Recommendation r);

// Where a signal is fine (risk 0), of concern (risk 0.5) and severe (risk 1.0); risk grows
// linearly between.
struct Levels {
  double fine, concern, severe;
};
// A signal's levels when the tensor is judged under an FP8 recipe and under an FP4 one: a 4-bit
// cast of N(0, 1) data by NVFP4 already flushes about 7% of it to zero at about 20 dB SQNR, so
// FP8's levels would condemn every FP4 tensor.
struct Threshold {
  const char* signal;
  Levels fp8, fp4;
  const char* meaning;
};
const std::vector<Threshold>& advice_thresholds();
// The signals a tensor's risk is scored on, each with its row in advice_thresholds().
inline constexpr const char* kAdviceSignals[] = {"underflow_ratio", "overflow_ratio", "sqnr_db",
                                                 "1-cosine",        "lagging_share",  "spike_blame"};

// Thresholds for TE's AutoswitchGemm (TE PR #2883, transformer_engine/debug/features/
// autoswitch_gemm.py: a GEMM runs in high precision while a monitored tensor's underflow% or MSE
// crosses them), set between what the tensor measured at its typical and at its worst sampled step.
struct AutoswitchThresholds {
  double underflow_pct = 0;  // percent, as AutoswitchGemm's underflow_threshold_pct
  double mse = 0;            // absolute, as its mse_threshold
};

struct TensorAdvice {
  TensorKey tensor;
  double risk = 0;                 // 0 = nothing to see, 1 = severe; the largest signal's share
  std::string driver;              // the signal that set the risk
  Recommendation recommendation = Recommendation::kKeepFp8;
  std::string reason;              // one sentence with the numbers behind it
  // Medians over the run's samples (NaN when not sampled), under the what-if recipe that casts as
  // the job does (what_if_recipe: tensor_current for per-tensor scaling and BF16 runs, else the
  // block recipe of the job's scale layout); overflow under delayed scaling.
  RecipeKind what_if_recipe = RecipeKind::kTensorCurrent;
  double underflow_current = 0, overflow_delayed = 0, sqnr_current_db = 0, one_minus_cosine = 0;
  double lagging_share = 0;        // sampled steps where delayed scaling clipped (scale above current)
  double saturation_observed = 0;  // share of the job's own FP8 codes at +-max (mean; informational:
                                   // with margin 0 the amax itself lands there)
  std::size_t spike_blame = 0;     // onsets at which this tensor was the first suspect
  std::string what_if_source;      // whose BF16 tensor the what-ifs come from: the run or its baseline
  // What that tensor was: a high-precision GEMM operand, or the input of the job's own cast (an
  // FP8 or FP4 run's own tensor, captured where Transformer Engine cast it, or recomputed).
  DataSource what_if_data = DataSource::kGemmOperand;
  std::optional<ReplaySuggestion> replay;
  const FloatFormat* observed_format = nullptr;    // the format the job cast this tensor to, if it did
  ScaleLayout observed_layout = ScaleLayout::kNone;  // the job's block-scale layout, if it used one
  std::optional<RecipeKind> finer_recipe;          // kFinerRecipe: the recipe that holds this tensor (mxfp8)
  // Set when the tensor is fine at most sampled steps but crosses a level of concern at some:
  // switch its GEMM to high precision then, rather than for good.
  std::optional<AutoswitchThresholds> autoswitch;
};

struct RunAdvice {
  std::string run;
  std::uint64_t sampling_interval = 1;  // the run's, for AutoswitchGemm's freq
  std::vector<TensorAdvice> tensors;    // highest risk first
  std::vector<ExpertOutlier> experts;   // MoE experts that depart from their layer's others
  RecipeLadder ladder;                  // the recipe each GEMM can take, and the share ready for FP4
};

// An FP8 run captures its tensors already cast (its own scale and codes, Caster::job()), so
// what current and delayed scaling would do to them comes from the same tensor of the BF16
// baseline when the run has no BF16 capture of its own.
RunAdvice advise(const RunRecords& run, const std::vector<Attribution>& onsets, const RunRecords* baseline = nullptr);

}  // namespace fp8scope::insight
