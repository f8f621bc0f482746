// A run's sampled statistics out of the history, grouped per tensor (layer, gemm, operand) and per
// recipe and format, in step order: what attribution, advice and the report read.
#pragma once

#include <cstdint>
#include <functional>
#include <array>
#include <map>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/caster.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/scale_layout.h"
#include "fp8scope/history/history_reader.h"

namespace fp8scope::insight {

struct TensorKey {
  std::string layer, gemm, operand;
  auto operator<=>(const TensorKey&) const = default;
  std::string name() const { return layer + " " + gemm + " " + operand; }
};

// A series of a tensor: what cast it (a recipe's what-if, or the job's own codes) into which
// format (a float_formats.h row: a checkpoint's codes may be FNUZ). Ordered by caster, then by the
// format's name.
struct RecipeKey {
  Caster caster = Caster::job();
  const FloatFormat* format = &kE4M3;

  bool operator==(const RecipeKey& o) const { return caster == o.caster && format == o.format; }
  bool operator<(const RecipeKey& o) const {
    return caster != o.caster ? caster < o.caster : std::string_view(format->name) < std::string_view(o.format->name);
  }
  std::string name() const { return std::string(caster.name()) + " " + format->name; }
};

// The statistics insight reads, of the many the history keeps: a run's points hold only these, so
// a study of 10 million records fits in memory.
inline constexpr const char* kStudiedStatistics[] = {
    "underflow_ratio", "overflow_ratio", "saturation_ratio",   "mse", "cosine",
    "sqnr_db",         "amax",           "dynamic_range_log2", "block_scale_floor_ratio",
    // Early warnings (early_warnings.h).
    "kurtosis",        "channel_amax_ratio", "persistent_outlier_channels"};
inline constexpr std::size_t kStudiedStatisticCount = std::size(kStudiedStatistics);

// A studied statistic, named by a string literal that is checked when compiling: a name that is not
// in kStudiedStatistics does not compile.
struct StudiedStatistic {
  std::size_t index;
  const char* key;
  consteval StudiedStatistic(const char* name) : index(find(name)), key(kStudiedStatistics[index]) {}

 private:
  static consteval std::size_t find(const char* name) {
    for (std::size_t i = 0; i < kStudiedStatisticCount; ++i) {
      if (std::string_view(name) == kStudiedStatistics[i]) return i;
    }
    throw "not one of kStudiedStatistics";
  }
};

// kStudiedStatistics' index of a statistic named at run time (the history's rows, tests).
std::optional<std::size_t> studied_statistic_index(std::string_view key);

struct RecordPoint {
  std::uint64_t step = 0;
  std::uint32_t rank = 0;          // of the rank the point is from (the lowest that sampled the step)
  double scale = 0, scale_current = 0;
  double scale_max = 0;            // block-scaled codes: the largest block scale (scale is the smallest)
  std::array<double, kStudiedStatisticCount> statistics{};  // kStudiedStatistics; NaN = not computed
  std::string codes_digest;        // see HistoryRecord
  DataSource source = DataSource::kGemmOperand;  // what its figures came from (see HistoryRecord)
};

struct TensorRecords {
  DType dtype = DType::kF32;  // as sampled: high precision for what-ifs, codes for the job's own
  // Each in step order, the lowest rank per step: every sampled step up to SeriesLimits::max_points,
  // else an evenly strided sample and the last step (see load_run_records).
  std::map<RecipeKey, std::vector<RecordPoint>> recipes;
  // Of a thinned series, the points around the loss onsets that its sample lacks, in step order:
  // attribution reads them with the sample; the medians and charts do not, so they stay unbiased.
  std::map<RecipeKey, std::vector<RecordPoint>> onset_points;
  ScaleLayout scale_layout = ScaleLayout::kNone;  // the job's own block-scale layout; kNone: per-tensor or none

  // The series `caster` cast (its first format), and that format; nullptr when not sampled.
  const std::vector<RecordPoint>* find(Caster caster, const FloatFormat** format = nullptr) const;
  const std::vector<RecordPoint>* find(RecipeKind recipe, const FloatFormat** format = nullptr) const {
    return find(Caster::recipe(recipe), format);
  }
  // The what-if recipe that casts as the job cast this tensor: the block recipe of its scale layout
  // (mxfp8 or mxfp4, nvfp4, block_1x128, block_128x128), else tensor_current.
  RecipeKind matching_recipe() const;
  bool block_scaled() const { return scale_layout != ScaleLayout::kNone; }
};

// The daemon's GEMM check of a layer at one step (one accumulation mode).
struct GemmOutputPoint {
  std::uint64_t step = 0;
  std::uint32_t rank = 0;
  double mse = 0, cosine = 0, max_rel_error = 0;
};

// How much of a long series a study keeps, so that its memory is bounded by the run's tensors and
// not by its records: a strided sample of at most max_points points per series, plus, whatever
// the stride, the `before` sampled steps before each step of `whole_at` and the `after` at and after
// it (attribution's onset windows, see attribution_limits).
inline constexpr std::size_t kDefaultSeriesPoints = 512;
struct SeriesLimits {
  std::size_t max_points = kDefaultSeriesPoints;  // 0: every point
  std::vector<std::uint64_t> whole_at;
  std::size_t before = 0, after = 0;
};
// Only the strided sample: no steps kept whole.
inline SeriesLimits sample_limits(std::size_t max_points) {
  SeriesLimits limits;
  limits.max_points = max_points;
  return limits;
}

struct RunRecords {
  std::string run;
  std::map<TensorKey, TensorRecords> tensors;
  // layer -> accumulate -> its checks in step order, the lowest rank per step.
  std::map<std::string, std::map<std::string, std::vector<GemmOutputPoint>>> gemm_outputs;
  std::uint64_t records = 0;
  std::uint64_t sampling_interval = 1;  // the median gap between sampled steps
  // Series (tensor and recipe, or layer and accumulation) that had more than max_points sampled
  // steps and were thinned, and the widest gap in steps between the points sampled of any of them.
  std::uint64_t thinned_series = 0, widest_gap = 0;
  std::size_t max_points = kDefaultSeriesPoints;
};

// A mixture-of-experts layer's experts are tensors of their own, "<layer>/expert<N>", so that every
// study (compare, advise, report) sees an expert as it sees a dense layer.
std::string expert_layer_name(const std::string& layer, std::int64_t expert);
// The MoE layer and expert of such a name; nothing for a dense layer's.
std::optional<std::pair<std::string, std::int64_t>> split_expert_layer(const std::string& layer);

// Reads every record of `run`, streaming: each row becomes one compact point of its series (no
// copy of the row is kept) and stays while `limits` allow; progress(done, total) is called as rows
// arrive (total from a count taken first). An error when the run has no records.
Result<RunRecords> load_run_records(const history::HistoryReader& history, const std::string& run,
                                    const std::function<void(std::uint64_t, std::uint64_t)>& progress = nullptr,
                                    const SeriesLimits& limits = {});

// "" when nothing was thinned, else one line saying what was and how to keep it all.
std::string thinning_note(const RunRecords& records);

// The value of a statistic in a point (NaN when the record has none).
inline double statistic(const RecordPoint& p, StudiedStatistic s) { return p.statistics[s.index]; }

}  // namespace fp8scope::insight
