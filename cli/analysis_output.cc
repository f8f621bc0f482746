#include "fp8scope/cli/analysis_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fp8scope/kernels/statistics_table.h"

namespace fp8scope::cli {
namespace {

nlohmann::ordered_json number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

nlohmann::ordered_json tensor_fields(const std::string& file, const FileTensor& tensor) {
  nlohmann::ordered_json j;
  j["file"] = file;
  j["tensor"] = tensor.name;
  j["dtype"] = tensor.dtype ? dtype_name(*tensor.dtype) : tensor.file_dtype;
  j["file_dtype"] = tensor.file_dtype;
  j["shape"] = tensor.shape;
  j["numel"] = tensor.numel();
  return j;
}

std::string format_value(double v, const char* printf_format) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, v);
  return buf;
}

std::string percent(double ratio) {
  if (std::isnan(ratio)) return "-";
  if (ratio == 0.0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof buf, ratio < 1e-4 ? "%.2e%%" : "%.4f%%", ratio * 100.0);
  return buf;
}

double stat(const char* key, const TensorMoments& m, const QuantStats& q) { return find_statistic(key)->compute(m, q); }

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

nlohmann::ordered_json recipe_json(const std::string& file, const FileTensor& tensor, const TensorReport& report,
                                   const RecipeResult& recipe) {
  nlohmann::ordered_json j = tensor_fields(file, tensor);
  j["recipe"] = recipe_name(recipe.plan.recipe.kind);
  j["format"] = format_name(recipe.plan.format);
  const std::optional<float> scale = recipe.tensor_scale();
  j["scale"] = scale ? number(*scale) : nullptr;
  j["scale_min"] = number(recipe.stats.scale_min);
  j["scale_max"] = number(recipe.stats.scale_max);
  j["nonfinite"] = report.moments.nan + report.moments.inf;
  for (const Statistic& s : statistics()) {
    if (std::string(s.key) == "numel") continue;  // already there, as an integer
    if (s.per_recipe() && !s.applies_to(false)) continue;  // the job's own codes only
    const double v = s.value(report.moments, recipe.stats, report.channels);
    j[s.key] = std::string(s.unit) == "elements" ? nlohmann::ordered_json(static_cast<std::uint64_t>(v)) : number(v);
  }
  j["log2_histogram"] = {{"min_log2", kHistogramMinLog2},
                         {"counts", std::vector<std::uint64_t>(std::begin(recipe.stats.histogram),
                                                               std::end(recipe.stats.histogram))}};
  j["seconds"] = report.seconds;
  return j;
}

nlohmann::ordered_json observed_json(const std::string& file, const FileTensor& tensor, const ObservedAnalysis& a,
                                     const ScaleLayoutTerm& layout, bool relative, double seconds) {
  nlohmann::ordered_json j = tensor_fields(file, tensor);
  j["recipe"] = "observed";
  j["value_units"] = relative ? "relative" : "real";
  j["format"] = format_name(code_format(*tensor.dtype));
  j["scale_layout"] = layout.name;
  const bool per_tensor = layout.value == ScaleLayout::kTensorScalar;
  j["scale"] = per_tensor ? number(a.stats.scale_min) : nullptr;
  j["scale_min"] = number(a.stats.scale_min);
  j["scale_max"] = number(a.stats.scale_max);
  j["nonfinite"] = a.moments.nan + a.moments.inf;
  for (const Statistic& s : statistics()) {
    if (std::string(s.key) == "numel" || s.per_channel() || (s.per_recipe() && !s.applies_to(true, !per_tensor))) continue;
    const double v = s.compute(a.moments, a.stats);
    j[s.key] = std::string(s.unit) == "elements" ? nlohmann::ordered_json(static_cast<std::uint64_t>(v)) : number(v);
  }
  if (!per_tensor) {
    j["scale_blocks"] = a.stats.scale_blocks;
    j["scale_log2_histogram"] = {{"min_log2", kScaleHistogramMinLog2},
                                 {"counts", std::vector<std::uint64_t>(std::begin(a.stats.scale_histogram),
                                                                       std::end(a.stats.scale_histogram))}};
  }
  j["seconds"] = seconds;
  return j;
}

nlohmann::ordered_json skipped_json(const std::string& file, const FileTensor& tensor) {
  nlohmann::ordered_json j = tensor_fields(file, tensor);
  j["skipped"] = tensor.skip_reason;
  return j;
}

nlohmann::ordered_json refused_json(const std::string& file, const FileTensor& tensor, RecipeKind recipe,
                                    const std::string& why) {
  nlohmann::ordered_json j = tensor_fields(file, tensor);
  j["recipe"] = recipe_name(recipe);
  j["not_computed"] = why;
  return j;
}

void print_table(std::ostream& out, const FileTensor& tensor, const TensorReport& report) {
  const TensorMoments& m = report.moments;
  const QuantStats none;
  out << "tensor " << tensor.name << "  " << (tensor.dtype ? dtype_name(*tensor.dtype) : "?") << " "
      << shape_text(tensor.shape) << "  " << m.numel << " elements\n";
  out << "  amax " << format_value(stat("amax", m, none), "%.6g") << "  amin " << format_value(stat("amin", m, none), "%.6g")
      << "  range " << format_value(stat("dynamic_range_log2", m, none), "%.1f") << " binades"
      << "  mean " << format_value(stat("mean", m, none), "%.4g") << "  std " << format_value(stat("std", m, none), "%.4g")
      << "  zeros " << percent(stat("zero_ratio", m, none)) << "  NaN " << m.nan << "  Inf " << m.inf << "\n";
  const ChannelSummary& c = report.channels;
  if (c.channels > 0) {
    out << "  channels " << c.channels << "  largest/median amax " << format_value(c.amax_ratio(), "%.3g") << "  "
        << c.outliers.size() << " outlier" << (c.outliers.size() == 1 ? "" : "s") << " above "
        << format_value(kDefaultOutlierChannelFactor, "%g") << "x the median";
    for (std::size_t k = 0; k < std::min<std::size_t>(c.outliers.size(), 8); ++k) out << (k ? "," : ": ") << c.outliers[k];
    out << (c.outliers.size() > 8 ? ",...\n" : "\n");
  }
  char line[256];
  std::snprintf(line, sizeof line, "  %-15s %-6s %-19s %-11s %-11s %-11s %-12s %-9s %s\n", "recipe", "format", "scale",
                "underflow", "overflow", "saturated", "mse", "cosine", "sqnr_dB");
  out << line;
  for (const RecipeResult& r : report.recipes) {
    const QuantStats& q = r.stats;
    const std::optional<float> s = r.tensor_scale();
    const std::string scale = s ? format_value(*s, "%.6g")
                                : format_value(q.scale_min, "%.3g") + ".." + format_value(q.scale_max, "%.3g");
    std::snprintf(line, sizeof line, "  %-15s %-6s %-19s %-11s %-11s %-11s %-12s %-9s %s\n",
                  recipe_name(r.plan.recipe.kind), format_name(r.plan.format), scale.c_str(),
                  percent(stat("underflow_ratio", m, q)).c_str(), percent(stat("overflow_ratio", m, q)).c_str(),
                  percent(stat("saturation_ratio", m, q)).c_str(), format_value(stat("mse", m, q), "%.4g").c_str(),
                  format_value(stat("cosine", m, q), "%.6f").c_str(), format_value(stat("sqnr_db", m, q), "%.2f").c_str());
    out << line;
  }
}

void print_observed(std::ostream& out, const FileTensor& tensor, const ObservedAnalysis& a, const ScaleLayoutTerm& layout,
                    bool relative) {
  const TensorMoments& m = a.moments;
  const QuantStats& q = a.stats;
  out << "tensor " << tensor.name << "  " << dtype_name(*tensor.dtype) << " codes " << shape_text(tensor.shape)
      << "  " << m.numel << " elements, scales " << layout.name << "\n";
  out << "  dequantized: amax " << format_value(stat("amax", m, q), "%.6g") << "  amin "
      << format_value(stat("amin", m, q), "%.6g") << "  range " << format_value(stat("dynamic_range_log2", m, q), "%.1f")
      << " binades  zeros " << percent(stat("zero_ratio", m, q)) << "  NaN " << m.nan << "  Inf " << m.inf << "\n";
  if (relative) {
    out << "  values relative to the per-tensor factor the block scales multiply, which --scale-inv gives: amax, "
           "amin and the other figures in the tensor's unit are not its own\n";
  }
  out << "  codes at +-max " << percent(stat("saturation_ratio", m, q)) << "  scale "
      << format_value(q.scale_min, "%.3g") << ".." << format_value(q.scale_max, "%.3g") << "\n";
  if (layout.value != ScaleLayout::kTensorScalar) {
    out << "  " << q.scale_blocks << " scale blocks holding values: at the encoding's floor "
        << percent(stat("block_scale_floor_ratio", m, q)) << ", at its ceiling "
        << percent(stat("block_scale_ceiling_ratio", m, q)) << ", widest block "
        << format_value(stat("max_block_dynamic_range_log2", m, q), "%.1f") << " binades\n";
  }
}

void print_skipped(std::ostream& out, const FileTensor& tensor) {
  out << "skipped " << tensor.name << " (" << tensor.file_dtype << " " << shape_text(tensor.shape)
      << "): " << tensor.skip_reason << "\n";
}

}  // namespace fp8scope::cli
