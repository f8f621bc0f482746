#include "fp8scope/te/nvdlfw_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
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

// The recipe prefix of a record's stat names; nothing for what TE has no name for.
std::optional<std::string> te_prefix(const history::HistoryRecord& r) {
  if (r.caster.is_job()) {  // the job's own quantization: TE's bare names, NVFP4's prefixed anyway
    const bool nvfp4 = r.format == CastFormat::kE2M1 && storage_of(r.scale_layout) == ScaleLayout::kVec16Ue4m3;
    return nvfp4 ? std::string(recipe_for(RecipeKind::kNvfp4, r.operand)->prefix) + "_" : "";
  }
  const RecipeName* name = recipe_for(*r.caster.recipe_kind(), r.operand);
  if (name == nullptr) return std::nullopt;
  return std::string(name->prefix) + "_";
}

double statistic_of(const history::HistoryRecord& r, const char* key) {
  const Statistic* s = find_statistic(key);
  const auto k = static_cast<std::size_t>(s - statistics().data());
  return s != nullptr && k < r.statistics.size() ? r.statistics[k] : std::nan("");
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

std::vector<NvdlfwLine> NvdlfwLog::lines(const history::HistoryRecord& r) {
  std::vector<NvdlfwLine> out;
  const TensorName& tensor = tensor_of(r.operand);
  // The GEMM whose input TE logs a tensor as: the first to quantize it in an iteration.
  if (r.gemm != tensor.rowwise_gemm) return out;
  const std::optional<std::string> prefix = te_prefix(r);
  if (!prefix) return out;
  const std::string name = te_layer(r) + "_" + tensor.name + "_";
  const std::string time = asctime_of(r.time);
  char iteration[32];
  std::snprintf(iteration, sizeof iteration, "%06llu", static_cast<unsigned long long>(r.step));
  const auto line = [&](const std::string& stat, double value) {
    out.push_back({r.rank, time + " - INFO - " + name + stat + " \t\t\t\t iteration=" + iteration +
                               " \t\t\t\t value=" + python_4f(value)});
  };
  // LogTensorStats: the high-precision tensor's, once a tensor and step whatever the recipes.
  if (tensor_stats_written_.insert({r.rank, te_layer(r), tensor.name, r.step}).second) {
    line("cur_amax", statistic_of(r, "amax"));
    line("dynamic_range", statistic_of(r, "dynamic_range_log2"));
    line("mean", statistic_of(r, "mean"));
    const double n = static_cast<double>(r.numel);
    line("std", n > 1 ? statistic_of(r, "std") * std::sqrt(n / (n - 1)) : std::nan(""));  // torch.std: unbiased
    for (const char* stat : {"min", "max", "l1_norm", "l2_norm"}) line(stat, statistic_of(r, stat));
  }
  line(*prefix + "underflows%", 100.0 * statistic_of(r, "underflow_ratio"));
  line(*prefix + "mse", statistic_of(r, "mse"));
  if (r.caster.is(RecipeKind::kTensorDelayed)) line(*prefix + "overflows%", 100.0 * statistic_of(r, "overflow_ratio"));
  // The scale_inv extremes over the tensor's one scale or its blocks' (log_fp8_tensor_stats.py:
  // every FP8 recipe, MXFP8's and block scaling's included); NVFP4's stats have none.
  const bool nvfp4 = r.format == CastFormat::kE2M1;
  const double largest_scale = std::max(r.scale, r.scale_max);
  if (!nvfp4 && r.scale > 0) {
    line(*prefix + "scale_inv_min", 1.0 / largest_scale);
    line(*prefix + "scale_inv_max", 1.0 / r.scale);
  }
  return out;
}

std::string NvdlfwLog::file_of(const std::string& dir, std::uint32_t rank) {
  return dir + "/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-" + std::to_string(rank) + ".log";
}

}  // namespace fp8scope::te
