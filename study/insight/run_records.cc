#include "fp8scope/insight/run_records.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"

namespace fp8scope::insight {

const std::vector<RecordPoint>* TensorRecords::find(const std::string& recipe, std::string* format) const {
  for (const auto& [key, points] : recipes) {
    if (key.recipe != recipe) continue;
    if (format != nullptr) *format = key.format;
    return &points;
  }
  return nullptr;
}

const char* TensorRecords::matching_recipe() const {
  struct Match {
    const char* layout;
    const char* fp8;  // the recipe for FP8 codes
    const char* fp4;  // for FP4 codes
  };
  // OUTER_VEC_32F (rowwise) has no recipe of its own: per-tensor current scaling is the nearest.
  static constexpr Match kMatches[] = {{"vec32_ue8m0", "mxfp8", "mxfp4"},
                                       {"vec16_ue4m3", "nvfp4", "nvfp4"},
                                       {"vec128_32f", "block_1x128", "block_1x128"},
                                       {"blk128x128_32f", "block_128x128", "block_128x128"}};
  for (const Match& m : kMatches) {
    if (scale_layout == m.layout) return dtype == "e2m1" ? m.fp4 : m.fp8;
  }
  return "tensor_current";
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

Result<RunRecords> load_run_records(const history::HistoryReader& history, const std::string& run,
                                    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
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
  Status s = history.query(filter, [&](const history::HistoryRecord& r) {
    const std::string layer = r.expert >= 0 ? expert_layer_name(r.layer, r.expert) : r.layer;
    TensorRecords& tensor = out.tensors[TensorKey{layer, gemm_name(r.gemm), operand_name(r.operand)}];
    tensor.dtype = r.dtype;
    if (r.recipe == "observed" && r.scale_layout != "scalar_32f") tensor.scale_layout = r.scale_layout;
    RecordPoint& p = tensor.recipes[RecipeKey{r.recipe, r.format}].emplace_back();
    p.step = r.step;
    p.rank = r.rank;
    p.scale = r.scale;
    p.scale_current = r.scale_current;
    p.scale_max = r.scale_max;
    for (std::size_t i = 0; i < kStudiedStatisticCount; ++i) {
      p.statistics[i] = columns[i] < r.statistics.size() ? r.statistics[columns[i]] : std::nan("");
    }
    p.codes_digest = r.codes_digest;
    if (++out.records % 4096 == 0 && progress) progress(out.records, total.value());
    return true;
  });
  if (!s.ok()) return s;
  if (progress) progress(out.records, total.value());
  // Step order, one point per step: several ranks sample the same tensor, the lowest rank's stays.
  std::vector<std::uint64_t> gaps;
  for (auto& [key, tensor] : out.tensors) {
    for (auto& [recipe, points] : tensor.recipes) {
      std::stable_sort(points.begin(), points.end(), [](const RecordPoint& a, const RecordPoint& b) {
        return a.step != b.step ? a.step < b.step : a.rank < b.rank;
      });
      points.erase(std::unique(points.begin(), points.end(),
                               [](const RecordPoint& a, const RecordPoint& b) { return a.step == b.step; }),
                   points.end());
      points.shrink_to_fit();
      for (std::size_t i = 1; i < points.size(); ++i) gaps.push_back(points[i].step - points[i - 1].step);
    }
  }
  if (!gaps.empty()) {
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
    out.sampling_interval = std::max<std::uint64_t>(1, gaps[gaps.size() / 2]);
  }
  std::map<std::pair<std::string, std::string>, std::map<std::uint64_t, std::pair<std::uint32_t, GemmOutputPoint>>> checks;
  s = history.query_gemm_outputs(run, [&](const history::GemmOutputRecord& g) {
    auto& steps = checks[{g.layer, g.accumulate}];
    auto it = steps.find(g.step);
    if (it == steps.end() || g.rank < it->second.first) {
      steps[g.step] = {g.rank, GemmOutputPoint{g.step, g.mse, g.cosine, g.max_rel_error}};
    }
    return true;
  });
  if (!s.ok()) return s;
  for (auto& [key, steps] : checks) {
    auto& points = out.gemm_outputs[key.first][key.second];
    for (auto& [step, rank_point] : steps) points.push_back(rank_point.second);
  }
  return out;
}

}  // namespace fp8scope::insight
