#include "fp8scope/insight/history_series.h"

#include <map>

namespace fp8scope::insight {

Result<std::vector<ScalarPoint>> scalar_series(const history::HistoryReader& history, const std::string& run,
                                               const std::string& name) {
  std::map<std::uint64_t, std::pair<std::uint32_t, double>> by_step;  // step -> (rank, value)
  Status s = history.query_scalars(run, name, [&](const history::ScalarRecord& r) {
    auto [it, added] = by_step.try_emplace(r.step, r.rank, r.value);
    if (!added && r.rank < it->second.first) it->second = {r.rank, r.value};
    return true;
  });
  if (!s.ok()) return s;
  std::vector<ScalarPoint> series;
  series.reserve(by_step.size());
  for (const auto& [step, rank_value] : by_step) series.push_back({step, rank_value.second});
  return series;
}

Result<std::set<std::string>> runs_with_scalar(const history::HistoryReader& history, const std::string& name) {
  std::set<std::string> runs;
  Status s = history.query_scalars("", name, [&](const history::ScalarRecord& r) {
    runs.insert(r.run);
    return true;
  });
  if (!s.ok()) return s;
  return runs;
}

}  // namespace fp8scope::insight
