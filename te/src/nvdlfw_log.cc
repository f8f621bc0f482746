#include "fp8scope/te/nvdlfw_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <optional>

#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/te/te_names.h"
#include "fp8scope/vocabulary/printable_text.h"
#include "fp8scope/vocabulary/recipe_kind.h"

namespace fp8scope::te {
namespace {


// TE's layer: the module (fp8scope's label without its "#ordinal"); an expert of a grouped layer
// is its GEMM n, as TE names GroupedLinear's (docs/debug/2_config_file_structure.rst:113).
std::string te_layer(const history::HistoryRecord& r) {
  // Escaped: a history written by anything else may hold a name that would start a line.
  std::string layer = printable(r.layer.substr(0, r.layer.rfind('#')));
  if (r.expert >= 0) layer += ".gemm_" + std::to_string(r.expert);
  return layer;
}

// How a record's quantization stats are named: the recipe prefix, the feature that logs them, and
// whether the record may be a column-wise copy's.
struct StatNames {
  std::string prefix;  // "" for the job's own FP8 cast, else "<recipe>_"
  StatsFeature feature;
  bool columnwise;
};

// Nothing for what TE has no name for.
std::optional<StatNames> stat_names(const history::HistoryRecord& r) {
  if (r.caster.is_job()) {  // the job's own quantization: TE's bare names, NVFP4's prefixed anyway
    const ScaleLayout layout = storage_of(r.scale_layout);
    if (r.format == CastFormat::kE2M1 && layout == ScaleLayout::kVec16Ue4m3) {
      return StatNames{std::string(recipe_for(RecipeKind::kNvfp4, r.operand)->prefix) + "_", StatsFeature::kNvfp4, false};
    }
    const bool blocks = layout == ScaleLayout::kVec32Ue8m0 || layout == ScaleLayout::kVec128F32 ||
                        layout == ScaleLayout::kBlock128x128F32;
    return StatNames{"", StatsFeature::kFp8, blocks};
  }
  const RecipeName* name = recipe_for(*r.caster.recipe_kind(), r.operand);
  // LogNvfp4TensorStats reads the job's NVFP4 cast; TE has no NVFP4 what-if.
  if (name == nullptr || name->feature == StatsFeature::kNvfp4) return std::nullopt;
  return StatNames{std::string(name->prefix) + "_", name->feature, name->columnwise_stats};
}

double statistic_of(const history::HistoryRecord& r, const char* key) {
  const Statistic* s = find_statistic(key);
  const auto k = static_cast<std::size_t>(s - statistics().data());
  return s != nullptr && k < r.statistics.size() ? r.statistics[k] : std::nan("");
}

// Whether the record's figure `key` is in the units TE writes: not one in the tensor's unit where
// the record's values are relative to a factor it did not carry (TE's would be real; fp8scope
// writes no line rather than a wrong one).
bool known_units(const history::HistoryRecord& r, const char* key) {
  const Statistic* s = find_statistic(key);
  return !(r.relative_values && s != nullptr && s->in_tensor_units());
}

// A LogTensorStats figure as TE's torch ops give it (stats_computation.py:196-258): fp8scope's are
// over the finite elements, torch's over all of them. A NaN makes every one NaN. An Inf makes
// the amax, the norms and the dynamic range Inf and the std NaN; the mean, min and max then hang
// on signs the counts do not keep: no line.
std::optional<double> as_torch_computes(bool has_nan, bool has_inf, std::string_view name, double value) {
  if (has_nan) return std::nan("");
  if (!has_inf) return value;
  if (name == "cur_amax" || name == "l1_norm" || name == "l2_norm" || name == "dynamic_range") {
    return std::numeric_limits<double>::infinity();
  }
  if (name == "std") return std::nan("");
  return std::nullopt;
}

// Python's "{:.4f}", which writes nan and inf as words.
std::string python_4f(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char text[64];
  std::snprintf(text, sizeof text, "%.4f", v);
  return text;
}

// logging.Formatter's default asctime: local time, "YYYY-MM-DD HH:MM:SS,mmm".
std::string asctime_of(double seconds) {
  const auto whole = static_cast<std::time_t>(std::floor(seconds));
  const int millis = static_cast<int>((seconds - std::floor(seconds)) * 1000.0);
  std::tm local{};
  localtime_r(&whole, &local);
  char text[64];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(text + n, sizeof text - n, ",%03d", millis);
  return text;
}

}  // namespace

NvdlfwLog::NvdlfwLog(const TeConfig& config) : filtered_(true) {
  for (const TeLoggedStats& logged : config.logged) {
    Selection s{logged, std::nullopt, std::nullopt};
    std::string error;
    if (logged.rule.layer_regex[0] != '\0') s.layers = LayerPattern::compile(logged.rule.layer_regex, &error);
    if (logged.rule.and_layer_regex[0] != '\0') s.and_layers = LayerPattern::compile(logged.rule.and_layer_regex, &error);
    selections_.push_back(std::move(s));
  }
}

std::optional<std::vector<const TeLoggedStats*>> NvdlfwLog::selecting(const history::HistoryRecord& r) const {
  if (!filtered_) return std::nullopt;
  std::vector<const TeLoggedStats*> out;
  const std::string_view module = module_of_label(r.layer);
  for (const Selection& s : selections_) {
    const TeLoggedStats& l = s.logged;
    if (l.operand != r.operand || !rule_selects_step(l.rule, r.step)) continue;
    // An output is TE's output, dgrad or wgrad by the GEMM that wrote it.
    if (r.operand == Operand::kOut && !tensors_select(l.rule.tensors, r.gemm, r.operand)) continue;
    if ((l.rule.layer_regex[0] != '\0' && !(s.layers && s.layers->search(module))) ||
        (l.rule.and_layer_regex[0] != '\0' && !(s.and_layers && s.and_layers->search(module)))) {
      continue;
    }
    out.push_back(&l);
  }
  return out;
}

namespace {

// One record's lines under its TE name, those the config logs.
class RecordLines {
 public:
  RecordLines(const history::HistoryRecord& r, const std::string& layer, const char* tensor,
              std::optional<std::vector<const TeLoggedStats*>> selected, std::set<std::string>& written,
              std::vector<NvdlfwLine>& out)
      : r_(r),
        selected_(std::move(selected)),
        name_(layer + "_" + tensor + "_"),
        time_(asctime_of(r.time)),
        written_(written),
        out_(out) {
    std::snprintf(iteration_, sizeof iteration_, "%06llu", static_cast<unsigned long long>(r.step));
  }

  // Whether the config's `feature` logs `stat` (as the config names it) for this record.
  bool logs(FeatureRole feature, const std::string& stat) const {
    if (!selected_) return true;
    return std::any_of(selected_->begin(), selected_->end(), [&](const TeLoggedStats* l) {
      return l->feature == feature && std::find(l->stats.begin(), l->stats.end(), stat) != l->stats.end();
    });
  }

  // Once a name and step: the first record's (TE combines a step's feeds; see nvdlfw_log.h).
  void write(const std::string& stat, double value) {
    if (!written_.insert(name_ + stat).second) return;
    out_.push_back({r_.rank, time_ + " - INFO - " + name_ + stat + " \t\t\t\t iteration=" + iteration_ +
                                 " \t\t\t\t value=" + python_4f(value)});
  }

  // LogTensorStats: the high-precision tensor's; max_blockwise_dynamic_range the larger of both
  // orientations where TE computes both (activations and weights, log_tensor_stats.py:140).
  void tensor_stats(bool both_orientations) {
    const double n = static_cast<double>(r_.numel);
    const double sample_std = n > 1 ? statistic_of(r_, "std") * std::sqrt(n / (n - 1)) : std::nan("");  // torch.std
    struct TensorStat {
      const char* name;  // TE's
      const char* key;   // fp8scope's
      double value;
    };
    const TensorStat stats[] = {{"cur_amax", "amax", statistic_of(r_, "amax")},
                                {"dynamic_range", "dynamic_range_log2", statistic_of(r_, "dynamic_range_log2")},
                                {"mean", "mean", statistic_of(r_, "mean")},
                                {"std", "std", sample_std},
                                {"min", "min", statistic_of(r_, "min")},
                                {"max", "max", statistic_of(r_, "max")},
                                {"l1_norm", "l1_norm", statistic_of(r_, "l1_norm")},
                                {"l2_norm", "l2_norm", statistic_of(r_, "l2_norm")}};
    const bool has_nan = statistic_of(r_, "nan") > 0, has_inf = statistic_of(r_, "inf") > 0;
    for (const TensorStat& s : stats) {
      if (!known_units(r_, s.key) || !logs(FeatureRole::kLogTensorStats, s.name)) continue;
      if (const std::optional<double> v = as_torch_computes(has_nan, has_inf, s.name, s.value)) write(s.name, *v);
    }
    // None where TE would raise (NaN: no such blocks).
    for (const BlockRangeValue& b : r_.block_ranges) {
      const std::string stat = block_range_stat(b.spec);
      const double value = both_orientations ? std::max(b.rowwise, b.columnwise) : b.rowwise;
      if (std::isnan(b.rowwise) || (both_orientations && std::isnan(b.columnwise)) ||
          !logs(FeatureRole::kLogTensorStats, stat)) {
        continue;
      }
      write(stat + (both_orientations ? "_max_over_orientations" : ""), value);
    }
  }

 private:
  const history::HistoryRecord& r_;
  const std::optional<std::vector<const TeLoggedStats*>> selected_;
  const std::string name_, time_;
  char iteration_[32];
  std::set<std::string>& written_;  // the names written at this record's rank and step
  std::vector<NvdlfwLine>& out_;
};

}  // namespace

std::vector<NvdlfwLine> NvdlfwLog::lines(const history::HistoryRecord& r) {
  std::vector<NvdlfwLine> out;
  if (r.operand == Operand::kOut) {
    // A GEMM output: its LogTensorStats, row-wise only (log_tensor_stats.py:140), once a step.
    const char* tensor = logged_output(module_of_label(r.layer), r.gemm);
    if (tensor != nullptr) {
      RecordLines(r, te_layer(r), tensor, selecting(r), written_at(r), out).tensor_stats(false);
    }
    return out;
  }
  const TensorName& tensor = tensor_of(r.operand);
  // A tensor's row-wise copy is read by the first GEMM to quantize it in an iteration, whose input
  // TE logs it as; its column-wise copy by another.
  const bool rowwise = r.gemm == tensor.rowwise_gemm;
  if (!rowwise && r.gemm != tensor.columnwise_gemm) return out;
  const std::optional<StatNames> names = stat_names(r);
  if (!names || (!rowwise && !names->columnwise)) return out;
  RecordLines lines(r, te_layer(r), tensor.name, selecting(r), written_at(r), out);
  // LogTensorStats: the high-precision tensor's, whatever the recipes.
  if (rowwise) lines.tensor_stats(r.operand != Operand::kDy);
  // The quantization's: LogNvfp4TensorStats names its stats bare in the config, prefixed in the log.
  const bool nvfp4 = names->feature == StatsFeature::kNvfp4;
  const FeatureRole feature = nvfp4 ? FeatureRole::kLogNvfp4TensorStats : FeatureRole::kLogFp8TensorStats;
  const std::string suffix = rowwise ? "" : "_columnwise";
  const auto line = [&](const std::string& stat, double value) {
    const std::string written = names->prefix + stat + suffix;
    if (lines.logs(feature, nvfp4 ? stat : written)) lines.write(written, value);
  };
  line("underflows%", 100.0 * statistic_of(r, "underflow_ratio"));
  if (known_units(r, "mse")) line("mse", statistic_of(r, "mse"));
  if (r.caster.is(RecipeKind::kTensorDelayed)) line("overflows%", 100.0 * statistic_of(r, "overflow_ratio"));
  // The scale_inv extremes over the tensor's one scale or its blocks' (log_fp8_tensor_stats.py:
  // every FP8 recipe, MXFP8's and block scaling's included); NVFP4's stats have none.
  const double largest_scale = std::max(r.scale, r.scale_max);
  if (!nvfp4 && r.scale > 0) {
    line("scale_inv_min", 1.0 / largest_scale);
    line("scale_inv_max", 1.0 / r.scale);
  }
  return out;
}

std::set<std::string>& NvdlfwLog::written_at(const history::HistoryRecord& r) {
  std::map<std::uint64_t, std::set<std::string>>& steps = written_[r.rank];
  const bool newest = steps.empty() || r.step > steps.rbegin()->first;
  if (steps_remembered_ != 0 && newest && r.step >= steps_remembered_) {
    steps.erase(steps.begin(), steps.lower_bound(r.step - steps_remembered_));
  }
  return steps[r.step];
}

std::string NvdlfwLog::file_of(const std::string& dir, std::uint32_t rank) {
  return dir + "/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-" + std::to_string(rank) + ".log";
}

}  // namespace fp8scope::te
