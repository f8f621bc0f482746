#include "fp8scope/insight/expert_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

namespace fp8scope::insight {

const std::vector<ExpertStatistic>& expert_statistics() {
  static const std::vector<ExpertStatistic> kStatistics = {
      {"underflow_ratio", std::nullopt, "underflow", 1e-4},
      {"overflow_ratio", Caster::recipe(RecipeKind::kTensorDelayed), "overflow under delayed scaling", 1e-6},
      {"saturation_ratio", Caster::job(), "saturate the job's own casts", 1e-4},
      {"mse", std::nullopt, "lose (MSE)", 0},
  };
  return kStatistics;
}

namespace {

using Experts = std::map<std::int64_t, const TensorRecords*>;

// Each MoE tensor (layer, gemm, operand) with its experts' records.
std::map<TensorKey, Experts> moe_tensors(const RunRecords& run) {
  std::map<TensorKey, Experts> out;
  for (const auto& [key, records] : run.tensors) {
    const auto split = split_expert_layer(key.layer);
    if (split) out[TensorKey{split->first, key.gemm, key.operand}][split->second] = &records;
  }
  return out;
}

Caster caster_for(const ExpertStatistic& s, const TensorRecords& t) {
  return s.caster.value_or(Caster::recipe(t.matching_recipe()));
}

// The mean of a statistic over an expert's sampled steps; NaN when it has none.
double expert_mean(const TensorRecords& t, const ExpertStatistic& s) {
  const std::vector<RecordPoint>* points = t.find(caster_for(s, t));
  if (points == nullptr) return std::nan("");
  double sum = 0;
  std::size_t n = 0;
  for (const RecordPoint& p : *points) {
    const double v = statistic(p, s.statistic);
    if (std::isfinite(v)) sum += v, ++n;
  }
  return n == 0 ? std::nan("") : sum / static_cast<double>(n);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

// "expert 3", "experts 3 and 17", "experts 3, 5 and 17", "experts 3, 5, ... and 4 more".
std::string expert_list(const std::vector<std::int64_t>& experts) {
  constexpr std::size_t kNamed = 6;
  if (experts.size() == 1) return "expert " + std::to_string(experts[0]);
  std::string out = "experts ";
  const std::size_t named = std::min(experts.size(), kNamed);
  for (std::size_t i = 0; i < named; ++i) {
    if (i > 0) out += (i + 1 == named && experts.size() <= kNamed) ? " and " : ", ";
    out += std::to_string(experts[i]);
  }
  if (experts.size() > kNamed) out += " and " + std::to_string(experts.size() - kNamed) + " more";
  return out;
}

std::string sentence_of(const ExpertOutlier& o, const ExpertStatistic& s) {
  std::string text = expert_list(o.experts) + " of " + o.tensor.name() + " " + s.words + " ";
  text += std::isinf(o.factor) ? "where the layer's median is 0" : number(o.factor) + "x the layer's median";
  return text + " (" + number(o.values.front()) + " against " + number(o.median) + ", " +
         std::to_string(o.experts_in_layer) + " experts, " + o.caster.name() + ")";
}

std::optional<ExpertOutlier> outlier_of(const TensorKey& tensor, const Experts& experts, const ExpertStatistic& s,
                                        double factor) {
  std::vector<std::pair<double, std::int64_t>> means;
  for (const auto& [expert, records] : experts) {
    const double m = expert_mean(*records, s);
    if (std::isfinite(m)) means.emplace_back(m, expert);
  }
  if (means.size() < 3) return std::nullopt;  // a median of two says nothing about either
  std::vector<double> values;
  for (const auto& m : means) values.push_back(m.first);
  ExpertOutlier o;
  o.median = median_of(values);
  std::sort(means.begin(), means.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [v, expert] : means) {
    if (v <= s.floor || v < factor * o.median || v == o.median) break;
    o.experts.push_back(expert);
    o.values.push_back(v);
  }
  if (o.experts.empty()) return std::nullopt;
  o.tensor = tensor;
  o.statistic = s.statistic.key;
  o.caster = caster_for(s, *experts.begin()->second);
  o.factor = o.median > 0 ? o.values.front() / o.median : std::numeric_limits<double>::infinity();
  o.experts_in_layer = means.size();
  o.sentence = sentence_of(o, s);
  return o;
}

const ExpertStatistic& statistic_named(const std::string& key) {
  for (const ExpertStatistic& s : expert_statistics()) {
    if (key == s.statistic.key) return s;
  }
  return expert_statistics().front();
}

ExpertGrid grid_of(const TensorKey& tensor, const Experts& experts, const ExpertStatistic& s) {
  ExpertGrid g;
  g.tensor = tensor;
  g.statistic = s.statistic.key;
  g.caster = caster_for(s, *experts.begin()->second);
  std::set<std::uint64_t> steps;
  for (const auto& [expert, records] : experts) {
    if (const auto* points = records->find(caster_for(s, *records))) {
      for (const RecordPoint& p : *points) steps.insert(p.step);
    }
  }
  g.steps.assign(steps.begin(), steps.end());
  for (const auto& [expert, records] : experts) {
    std::vector<double> row(g.steps.size(), std::nan(""));
    if (const auto* points = records->find(caster_for(s, *records))) {
      for (const RecordPoint& p : *points) {
        const auto at = std::lower_bound(g.steps.begin(), g.steps.end(), p.step) - g.steps.begin();
        row[static_cast<std::size_t>(at)] = statistic(p, s.statistic);
      }
    }
    g.experts.push_back(expert);
    g.values.push_back(std::move(row));
  }
  return g;
}

}  // namespace

std::vector<ExpertOutlier> expert_outliers(const RunRecords& run, const ExpertSummaryOptions& options) {
  std::vector<ExpertOutlier> out;
  for (const auto& [tensor, experts] : moe_tensors(run)) {
    for (const ExpertStatistic& s : expert_statistics()) {
      if (auto o = outlier_of(tensor, experts, s, options.factor)) out.push_back(std::move(*o));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const ExpertOutlier& a, const ExpertOutlier& b) { return a.factor > b.factor; });
  return out;
}

std::vector<ExpertGrid> expert_grids(const RunRecords& run, const std::vector<ExpertOutlier>& outliers,
                                     const ExpertSummaryOptions& options) {
  const std::map<TensorKey, Experts> tensors = moe_tensors(run);
  std::vector<ExpertGrid> out;
  std::set<std::pair<TensorKey, std::string>> drawn;
  auto add = [&](const TensorKey& tensor, const ExpertStatistic& s) {
    const auto it = tensors.find(tensor);
    if (out.size() >= options.max_grids || it == tensors.end() || !drawn.insert({tensor, s.statistic.key}).second) return;
    out.push_back(grid_of(tensor, it->second, s));
  };
  for (const ExpertOutlier& o : outliers) add(o.tensor, statistic_named(o.statistic));
  // Then the worst layers by their worst expert's underflow.
  const ExpertStatistic& underflow = expert_statistics().front();
  std::vector<std::pair<double, TensorKey>> worst;
  for (const auto& [tensor, experts] : tensors) {
    double w = -1;
    for (const auto& [expert, records] : experts) {
      const double m = expert_mean(*records, underflow);
      if (std::isfinite(m)) w = std::max(w, m);
    }
    if (w >= 0) worst.emplace_back(w, tensor);
  }
  std::stable_sort(worst.begin(), worst.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [w, tensor] : worst) add(tensor, underflow);
  return out;
}

}  // namespace fp8scope::insight
