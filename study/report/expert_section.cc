#include "fp8scope/report/expert_section.h"

#include <algorithm>
#include <cmath>

#include "fp8scope/insight/expert_summary.h"
#include "fp8scope/report/svg_chart.h"

namespace fp8scope::report {
namespace {

Heatmap heatmap_of(const insight::ExpertGrid& g, std::size_t max_columns) {
  Heatmap map;
  map.title = g.tensor.name() + ": " + g.statistic + " per expert and step (" + g.caster.name() + ")";
  map.value_label = g.statistic;
  const std::size_t columns = std::min(max_columns, g.steps.size());
  map.cell_width = std::clamp(900 / static_cast<int>(std::max<std::size_t>(columns, 1)), 4, 24);
  for (std::size_t c = 0; c < columns; ++c) map.columns.push_back(static_cast<double>(g.steps[c * g.steps.size() / columns]));
  double high = 0;
  for (std::size_t r = 0; r < g.experts.size(); ++r) {
    std::vector<double> row(columns, std::nan(""));
    for (std::size_t s = 0; s < g.steps.size(); ++s) {
      const double v = g.values[r][s];
      double& slot = row[s * columns / g.steps.size()];
      if (std::isfinite(v) && (std::isnan(slot) || v > slot)) slot = v;  // a bucket's worst
      if (std::isfinite(v)) high = std::max(high, v);
    }
    map.rows.push_back("expert " + std::to_string(g.experts[r]));
    map.values.push_back(std::move(row));
  }
  // Ratios on the usual 1e-6..1 scale; an error (MSE) on the four decades below its largest value.
  if (g.statistic == "mse" && high > 0) map.high = high, map.low = high * 1e-4;
  return map;
}

}  // namespace

void expert_section(const insight::RunStudy& s, std::size_t columns, std::ostringstream& out) {
  const std::vector<insight::ExpertGrid> grids = insight::expert_grids(s.records, s.advice.experts);
  if (grids.empty()) return;
  out << "<h2>Experts</h2>";
  if (s.advice.experts.empty()) {
    out << "<p>No expert departs from its layer's others (by 4x its median underflow, overflow, saturation or MSE).</p>";
  } else {
    out << "<ul>";
    for (const insight::ExpertOutlier& e : s.advice.experts) out << "<li>" << html_escape(e.sentence) << "</li>";
    out << "</ul>";
  }
  for (const insight::ExpertGrid& g : grids) {
    if (!g.steps.empty()) out << "<div>" << render(heatmap_of(g, columns)) << "</div>";
  }
}

}  // namespace fp8scope::report
