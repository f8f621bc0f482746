// Everything fp8scope concludes about one run, read from the daemon's history: its loss signals
// (and, with a baseline, the comparison), the tensors that moved at each spike or divergence
// onset, and the advice per tensor. compare, advise and report all start here.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "fp8scope/insight/advice.h"
#include "fp8scope/insight/attribution.h"
#include "fp8scope/history/history_reader.h"
#include "fp8scope/insight/inference_check.h"
#include "fp8scope/insight/run_comparison.h"
#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

struct StudyOptions {
  std::string loss_name = "loss";
  SpikeOptions spikes;
  DivergenceOptions divergence;
  AttributionOptions attribution;
  std::size_t series_points = kDefaultSeriesPoints;  // SeriesLimits::max_points
};

struct RunStudy {
  std::string source;  // where the history was read (HistoryReader::location)
  RunRecords records;
  std::optional<RunRecords> baseline_records;  // when the baseline sampled tensors
  std::optional<RunLoss> loss;                 // when the run logged loss_name
  std::optional<LossComparison> comparison;    // when a baseline was given and logged it too
  std::optional<InferenceCheck> inference;     // when the run used FP8 weights the baseline sampled
  std::vector<Attribution> onsets;             // one per spike and one for divergence
  RunAdvice advice;
};

using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;

// An error when the run has no tensor records, or the baseline is named but has neither loss nor records.
Result<RunStudy> study_run(const history::HistoryReader& history, const std::string& run, const std::string& baseline,
                           const StudyOptions& options, const Progress& progress = nullptr);

}  // namespace fp8scope::insight
