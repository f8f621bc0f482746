#include "run_records.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp8scope/recipe.h"
#include "fp8scope/statistics_table.h"

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

double statistic(const RecordPoint& p, const char* key) {
  const Statistic* s = find_statistic(key);
  if (s == nullptr) return std::nan("");
  const auto index = static_cast<std::size_t>(s - statistics().data());
  return index < p.statistics.size() ? p.statistics[index] : std::nan("");
}

Result<RunRecords> load_run_records(const history::HistoryReader& history, const std::string& run,
                                    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  history::HistoryFilter filter;
  filter.run = run;
  filter.limit = std::numeric_limits<std::uint32_t>::max();
  Result<std::uint64_t> total = history.count(filter);
  if (!total.ok()) return total.status();
  if (total.value() == 0) return Status::error("run " + run + " has no tensor records in " + history.location());

  RunRecords out;
  out.run = run;
  // (tensor, recipe) -> step -> (rank, point): several ranks sample the same tensor; keep one.
  std::map<std::pair<TensorKey, RecipeKey>, std::map<std::uint64_t, std::pair<std::uint32_t, RecordPoint>>> by_step;
  Status s = history.query(filter, [&](const history::HistoryRecord& r) {
    TensorKey tk{r.layer, history::gemm_name(r.gemm), operand_name(r.operand)};
    TensorRecords& tensor = out.tensors[tk];
    tensor.dtype = r.dtype;
    if (r.recipe == "observed" && r.scale_layout != "scalar_32f") tensor.scale_layout = r.scale_layout;
    auto& steps = by_step[{tk, RecipeKey{r.recipe, r.format}}];
    auto it = steps.find(r.step);
    if (it == steps.end() || r.rank < it->second.first) {
      steps[r.step] = {r.rank, RecordPoint{r.step, r.scale, r.scale_current, r.scale_max, r.statistics, r.codes_digest}};
    }
    if (++out.records % 4096 == 0 && progress) progress(out.records, total.value());
    return true;
  });
  if (!s.ok()) return s;
  if (progress) progress(out.records, total.value());
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

  std::vector<std::uint64_t> gaps;
  for (auto& [key, steps] : by_step) {
    auto& points = out.tensors[key.first].recipes[key.second];
    std::uint64_t previous = 0;
    for (auto& [step, rank_point] : steps) {
      if (!points.empty()) gaps.push_back(step - previous);
      previous = step;
      points.push_back(std::move(rank_point.second));
    }
  }
  if (!gaps.empty()) {
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
    out.sampling_interval = std::max<std::uint64_t>(1, gaps[gaps.size() / 2]);
  }
  return out;
}

}  // namespace fp8scope::insight
