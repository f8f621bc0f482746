#include "fp8scope/insight/run_study.h"

#include "fp8scope/insight/history_series.h"

namespace fp8scope::insight {

Result<RunStudy> study_run(const history::HistoryReader& history, const std::string& run, const std::string& baseline,
                           const StudyOptions& o, const Progress& progress) {
  RunStudy study;
  study.source = history.location();
  // The loss first: its onsets say which points of a long series must be kept whole.
  Result<std::vector<ScalarPoint>> loss = scalar_series(history, run, o.loss_name);
  if (!loss.ok()) return loss.status();
  if (!loss.value().empty()) study.loss = analyze_run_loss(run, std::move(loss).value(), o.spikes, o.divergence);
  const SeriesLimits limits =
      study.loss ? attribution_limits(study.loss->spikes, study.loss->divergence, o.attribution, o.series_points)
                 : sample_limits(o.series_points);
  Result<RunRecords> records = load_run_records(history, run, progress, limits);
  if (!records.ok()) return records.status();
  study.records = std::move(records).value();
  if (study.loss) study.onsets = attribute_onsets(study.records, study.loss->spikes, study.loss->divergence, o.attribution);
  if (!baseline.empty()) {
    Result<std::vector<ScalarPoint>> base = scalar_series(history, baseline, o.loss_name);
    if (!base.ok()) return base.status();
    auto b = load_run_records(history, baseline, progress, sample_limits(o.series_points));
    if (base.value().empty() && !b.ok()) {
      return Status::error("baseline " + baseline + " has neither '" + o.loss_name + "' values nor tensor records in " +
                           history.location());
    }
    if (b.ok()) {
      study.baseline_records = std::move(b).value();
      study.inference = check_inference(study.records, *study.baseline_records);
    }
    if (study.loss && !base.value().empty()) {
      study.comparison = compare_loss(*study.loss, analyze_run_loss(baseline, std::move(base).value(), o.spikes, o.divergence));
    }
  }
  study.advice = advise(study.records, study.onsets, study.baseline_records ? &*study.baseline_records : nullptr);
  return study;
}

}  // namespace fp8scope::insight
