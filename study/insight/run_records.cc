#include "fp8scope/insight/run_records.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/insight/strided_series.h"

namespace fp8scope::insight {

const std::vector<RecordPoint>* TensorRecords::find(Caster caster, const FloatFormat** format) const {
  for (const auto& [key, points] : recipes) {
    if (key.caster != caster) continue;
    if (format != nullptr) *format = key.format;
    return &points;
  }
  return nullptr;
}

RecipeKind TensorRecords::matching_recipe() const {
  struct Match {
    ScaleLayout layout;
    RecipeKind fp8, fp4;  // the recipe for FP8 codes, and for FP4 codes
  };
  // OUTER_VEC_32F (rowwise) has no recipe of its own: per-tensor current scaling is the nearest.
  static constexpr Match kMatches[] = {
      {ScaleLayout::kVec32Ue8m0, RecipeKind::kMxfp8, RecipeKind::kMxfp4},
      {ScaleLayout::kVec16Ue4m3, RecipeKind::kNvfp4, RecipeKind::kNvfp4},
      {ScaleLayout::kVec16Ue4m3RowScaled, RecipeKind::kNvfp4Row, RecipeKind::kNvfp4Row},
      {ScaleLayout::kVec128F32, RecipeKind::kBlock1x128, RecipeKind::kBlock1x128},
      {ScaleLayout::kBlock128x128F32, RecipeKind::kBlock128x128, RecipeKind::kBlock128x128}};
  for (const Match& m : kMatches) {
    if (scale_layout == m.layout) return dtype == DType::kE2M1 ? m.fp4 : m.fp8;
  }
  return RecipeKind::kTensorCurrent;
}

std::optional<std::size_t> studied_statistic_index(std::string_view key) {
  for (std::size_t i = 0; i < kStudiedStatisticCount; ++i) {
    if (key == kStudiedStatistics[i]) return i;
  }
  return std::nullopt;
}

namespace {
constexpr std::string_view kExpertInfix = "/expert";
}  // namespace

std::string expert_layer_name(const std::string& layer, std::int64_t expert) {
  return layer + std::string(kExpertInfix) + std::to_string(expert);
}

std::optional<std::pair<std::string, std::int64_t>> split_expert_layer(const std::string& layer) {
  const std::size_t at = layer.rfind(kExpertInfix);
  if (at == std::string::npos) return std::nullopt;
  const std::string digits = layer.substr(at + kExpertInfix.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::make_pair(layer.substr(0, at), std::stoll(digits));
}

namespace {

// Counts a thinned series and its widest gap (of its strided sample, before windows are added).
template <class Point>
void note_thinned(RunRecords& out, const std::vector<Point>& sample) {
  ++out.thinned_series;
  for (std::size_t i = 1; i < sample.size(); ++i) out.widest_gap = std::max(out.widest_gap, sample[i].step - sample[i - 1].step);
}

// One series while the records stream in: its strided sample, the points kept whole around the
// limits' steps (whole_at sorted), and its last point. The window before an onset is filled from
// the series' most recent points when the first point at or past it arrives (every point before
// then was below it), so a row is copied into one window at a time, not into every later one.
class SeriesBuilder {
 public:
  SeriesBuilder(const SeriesLimits& limits, GapCounts* gaps)
      : limits_(&limits), sample_(limits.max_points, gaps), recent_(UINT64_MAX, limits.before, true) {
    for (std::uint64_t step : limits.whole_at) after_.emplace_back(step, limits.after, false);
  }

  void add(const RecordPoint& p) {
    sample_.add(p);
    reach(p.step);
    if (before_.size() < limits_->whole_at.size()) recent_.add(p);
    for (NearestSteps<RecordPoint>& w : before_) w.add(p);  // a late point before an onset passed
    for (NearestSteps<RecordPoint>& w : after_) w.add(p);
    if (!last_ || p.step > last_->step || (p.step == last_->step && p.rank < last_->rank)) last_ = p;
  }

  bool thinned() const { return sample_.stride() > 1; }

  // The sample and the last point into `sample`; the points kept whole that the sample lacks into
  // `onsets` (nothing when the series was not thinned: the sample is every point).
  void take(RunRecords& out, std::vector<RecordPoint>& sample, std::vector<RecordPoint>& onsets) {
    sample = sample_.take();
    if (!thinned()) return;
    note_thinned(out, sample);
    insert_lowest_rank(sample, *last_);
    reach(UINT64_MAX);  // onsets past the last point take what came before them
    for (const auto* windows : {&before_, &after_}) {
      for (const NearestSteps<RecordPoint>& w : *windows) {
        for (const RecordPoint& p : w.points()) insert_lowest_rank(onsets, p);
      }
    }
    before_ = {};  // what the windows held is in `onsets` now
    after_ = {};
    recent_ = NearestSteps<RecordPoint>(UINT64_MAX, 0, true);
    std::erase_if(onsets, [&](const RecordPoint& p) {
      return std::binary_search(sample.begin(), sample.end(), p,
                                [](const RecordPoint& a, const RecordPoint& b) { return a.step < b.step; });
    });
    sample.shrink_to_fit();
  }

 private:
  // Opens the windows before the onsets at or below `step`, from the latest points so far.
  void reach(std::uint64_t step) {
    while (before_.size() < limits_->whole_at.size() && step >= limits_->whole_at[before_.size()]) {
      NearestSteps<RecordPoint>& w = before_.emplace_back(limits_->whole_at[before_.size()], limits_->before, true);
      for (const RecordPoint& q : recent_.points()) w.add(q);
    }
  }

  const SeriesLimits* limits_;
  StridedSeries<RecordPoint> sample_;
  NearestSteps<RecordPoint> recent_;                  // the latest steps, while an onset is ahead
  std::vector<NearestSteps<RecordPoint>> before_, after_;  // before_: the onsets reached so far
  std::optional<RecordPoint> last_;
};

struct TensorBuilder {
  TensorRecords records;  // all but its series
  std::map<RecipeKey, SeriesBuilder> series;
};

std::uint64_t median_gap(const GapCounts& gaps) {
  std::uint64_t total = 0;
  for (const auto& [gap, count] : gaps) total += count;
  std::uint64_t seen = 0;
  for (const auto& [gap, count] : gaps) {
    seen += count;
    if (seen > total / 2) return std::max<std::uint64_t>(1, gap);
  }
  return 1;
}

}  // namespace

Result<RunRecords> load_run_records(const history::HistoryReader& history, const std::string& run,
                                    const std::function<void(std::uint64_t, std::uint64_t)>& progress,
                                    const SeriesLimits& limits) {
  history::HistoryFilter filter;
  filter.run = run;
  filter.limit = 0;
  Result<std::uint64_t> total = history.count(filter);
  if (!total.ok()) return total.status();
  if (total.value() == 0) return Status::error("run " + run + " has no tensor records in " + history.location());
  // Where each studied statistic sits in a history row.
  std::array<std::size_t, kStudiedStatisticCount> columns{};
  for (std::size_t i = 0; i < kStudiedStatisticCount; ++i) {
    columns[i] = static_cast<std::size_t>(find_statistic(kStudiedStatistics[i]) - statistics().data());
  }
  RunRecords out;
  out.run = run;
  out.max_points = limits.max_points;
  SeriesLimits sorted = limits;
  std::sort(sorted.whole_at.begin(), sorted.whole_at.end());
  sorted.whole_at.erase(std::unique(sorted.whole_at.begin(), sorted.whole_at.end()), sorted.whole_at.end());
  GapCounts gaps;
  std::map<TensorKey, TensorBuilder> building;
  Status s = history.query(filter, [&](const history::HistoryRecord& r) {
    // A GEMM's output is no operand the job casts: the study and its advice are about the inputs.
    if (r.operand == Operand::kOut) return true;
    const std::string layer = r.expert >= 0 ? expert_layer_name(r.layer, r.expert) : r.layer;
    TensorBuilder& tensor = building[TensorKey{layer, gemm_name(r.gemm), operand_name(r.operand)}];
    tensor.records.dtype = r.dtype;
    if (r.caster.is_job() && r.scale_layout != ScaleLayout::kTensorScalar) tensor.records.scale_layout = r.scale_layout;
    const RecipeKey key{r.caster, &format_row(r.format)};
    auto series = tensor.series.find(key);
    if (series == tensor.series.end()) series = tensor.series.emplace(key, SeriesBuilder(sorted, &gaps)).first;
    RecordPoint p;
    p.step = r.step;
    p.rank = r.rank;
    p.scale = r.scale;
    p.scale_current = r.scale_current;
    p.scale_max = r.scale_max;
    for (std::size_t i = 0; i < kStudiedStatisticCount; ++i) {
      p.statistics[i] = columns[i] < r.statistics.size() ? r.statistics[columns[i]] : std::nan("");
    }
    p.codes_digest = r.codes_digest;
    p.source = r.source;
    series->second.add(p);
    if (++out.records % 4096 == 0 && progress) progress(out.records, total.value());
    return true;
  });
  if (!s.ok()) return s;
  if (progress) progress(out.records, total.value());
  for (auto& [key, tensor] : building) {
    TensorRecords& records = out.tensors[key] = std::move(tensor.records);
    for (auto& [recipe, series] : tensor.series) {
      std::vector<RecordPoint> onsets;
      series.take(out, records.recipes[recipe], onsets);
      if (!onsets.empty()) records.onset_points[recipe] = std::move(onsets);
    }
  }
  out.sampling_interval = median_gap(gaps);
  std::map<std::pair<std::string, std::string>, StridedSeries<GemmOutputPoint>> checks;
  s = history.query_gemm_outputs(run, [&](const history::GemmOutputRecord& g) {
    auto it = checks.try_emplace({g.layer, g.accumulate}, limits.max_points, nullptr).first;
    it->second.add(GemmOutputPoint{g.step, g.rank, g.mse, g.cosine, g.max_rel_error});
    return true;
  });
  if (!s.ok()) return s;
  for (auto& [key, series] : checks) {
    const bool thinned = series.stride() > 1;
    std::vector<GemmOutputPoint>& points = out.gemm_outputs[key.first][key.second] = series.take();
    if (thinned) note_thinned(out, points);
  }
  return out;
}

std::string thinning_note(const RunRecords& r) {
  if (r.thinned_series == 0) return "";
  return "note: " + std::to_string(r.thinned_series) + " series of run " + r.run + " had more than " +
         std::to_string(r.max_points) + " sampled steps; their charts, medians and replays read a point every " +
         std::to_string(r.widest_gap) + " steps or closer (onset windows and the last step are whole); " +
         "--series-points raises the limit, 0 keeps every point";
}

}  // namespace fp8scope::insight
