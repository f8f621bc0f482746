// Plots as inline SVG text, so a report is one file that needs no script and no network: line
// charts (linear or log y, markers, vertical rules) and heatmaps (log colour scale, a tooltip per
// cell). Every label is escaped.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fp8scope::report {

std::string html_escape(const std::string& text);

struct LineSeries {
  std::string name, color;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y breaks the line
};

struct ChartMarker {
  double x = 0, y = 0;
  std::string label, color = "#d62728";
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log_y = false;
  std::vector<LineSeries> series;
  std::vector<ChartMarker> markers;
  std::vector<std::pair<double, std::string>> rules;  // vertical lines at x, with a label
  int width = 900, height = 300;
};

std::string render(const LineChart& chart);

struct Heatmap {
  std::string title, value_label;
  std::vector<std::string> rows;                // one label per row
  std::vector<double> columns;                  // the x value (step) of each column
  std::vector<std::vector<double>> values;      // rows x columns; NaN = not sampled
  double low = 1e-6, high = 1.0;                // the log colour scale's ends; <= low is white
  int cell_width = 6, cell_height = 14;
};

std::string render(const Heatmap& map);

}  // namespace fp8scope::report
