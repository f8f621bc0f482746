// What to do about each tensor of a run: a risk score and one recommendation, from its sampled
// statistics (what current and delayed scaling do to it), the attribution of the run's loss
// spikes, and a replay of its amax series. The thresholds are data (advice_thresholds()), so the
// table, the tests and the documentation read the same numbers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "amax_replay.h"
#include "attribution.h"
#include "run_records.h"

namespace fp8scope::insight {

enum class Recommendation {
  kKeepFp8,
  kCurrentScaling,   // delayed scaling's scale lags this tensor's amax: scale it from its own amax
  kTuneDelayed,      // keep delayed scaling with the replay's amax_history_len and margin
  kE5m2ForDy,        // the gradient spans more binades than E4M3 holds
  kFallBackToBf16,   // even current scaling loses too much: run this GEMM in BF16
};
const char* recommendation_name(Recommendation r);

// A signal's level of concern (risk 0.5) and of severity (risk 1.0); risk grows linearly between.
struct Threshold {
  const char* signal;
  double concern, severe;
  const char* meaning;
};
const std::vector<Threshold>& advice_thresholds();

struct TensorAdvice {
  TensorKey tensor;
  double risk = 0;                 // 0 = nothing to see, 1 = severe; the largest signal's share
  std::string driver;              // the signal that set the risk
  Recommendation recommendation = Recommendation::kKeepFp8;
  std::string reason;              // one sentence with the numbers behind it
  // Medians over the run's samples (NaN when not sampled).
  double underflow_current = 0, overflow_delayed = 0, sqnr_current_db = 0, one_minus_cosine = 0;
  double lagging_share = 0;        // sampled steps where delayed scaling clipped (scale above current)
  double saturation_observed = 0;  // share of the job's own FP8 codes at +-max (mean; informational:
                                   // with margin 0 the amax itself lands there)
  std::size_t spike_blame = 0;     // onsets at which this tensor was the first suspect
  std::string what_if_source;      // whose BF16 tensor the what-ifs come from: the run or its baseline
  std::optional<ReplaySuggestion> replay;
  std::string observed_format;     // the FP8 format the job cast this tensor to, if it was FP8
};

struct RunAdvice {
  std::string run;
  std::vector<TensorAdvice> tensors;  // highest risk first
};

// An FP8 run captures its tensors already cast (its own scale and codes, recipe "observed"), so
// what current and delayed scaling would do to them comes from the same tensor of the BF16
// baseline when the run has no BF16 capture of its own.
RunAdvice advise(const RunRecords& run, const std::vector<Attribution>& onsets, const RunRecords* baseline = nullptr);

}  // namespace fp8scope::insight
