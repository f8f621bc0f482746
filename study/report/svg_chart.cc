#include "fp8scope/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fp8scope::report {
namespace {

constexpr int kLeft = 70, kRight = 20, kTop = 30, kBottom = 45;

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

std::string tick_label(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// Round tick positions covering [lo, hi]: about `count` of them at 1, 2 or 5 x 10^k apart.
std::vector<double> ticks(double lo, double hi, int count) {
  std::vector<double> out;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(t);
  return out;
}

// White through yellow and orange to dark red, by position in [0, 1].
std::string heat_colour(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const double stops[][3] = {{255, 255, 255}, {255, 230, 120}, {240, 130, 40}, {180, 20, 20}, {90, 0, 0}};
  const double at = t * 4.0;
  const int i = std::min(3, static_cast<int>(at));
  const double f = at - i;
  char text[16];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", static_cast<int>(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return text;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render(const LineChart& c) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto ty = [&](double y) { return c.log_y ? std::log10(y) : y; };
  auto usable = [&](double y) { return std::isfinite(y) && (!c.log_y || y > 0); };
  for (const LineSeries& s : c.series) {
    for (auto [x, y] : s.points) {
      if (!usable(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, ty(y)), y1 = std::max(y1, ty(y));
    }
  }
  std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(c.width) + "' height='" +
                    std::to_string(c.height) + "' role='img'><title>" + html_escape(c.title) + "</title>";
  svg += "<text x='" + std::to_string(kLeft) + "' y='18' class='chart-title'>" + html_escape(c.title) + "</text>";
  if (!std::isfinite(x0)) return svg + "<text x='80' y='80'>no data</text></svg>";
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  const double w = c.width - kLeft - kRight, h = c.height - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * w; };
  auto py = [&](double y) { return kTop + (1.0 - (ty(y) - y0) / (y1 - y0)) * h; };
  svg += "<rect x='" + num(kLeft) + "' y='" + num(kTop) + "' width='" + num(w) + "' height='" + num(h) +
         "' fill='#fff' stroke='#999'/>";
  for (double t : ticks(x0, x1, 8)) {
    svg += "<line x1='" + num(px(t)) + "' x2='" + num(px(t)) + "' y1='" + num(kTop + h) + "' y2='" + num(kTop + h + 4) +
           "' stroke='#666'/><text x='" + num(px(t)) + "' y='" + num(kTop + h + 16) + "' text-anchor='middle'>" +
           tick_label(t) + "</text>";
  }
  for (double t : ticks(y0, y1, 5)) {
    const double y = kTop + (1.0 - (t - y0) / (y1 - y0)) * h;
    svg += "<line x1='" + num(kLeft) + "' x2='" + num(kLeft + w) + "' y1='" + num(y) + "' y2='" + num(y) +
           "' stroke='#eee'/><text x='" + num(kLeft - 6) + "' y='" + num(y + 4) + "' text-anchor='end'>" +
           tick_label(c.log_y ? std::pow(10.0, t) : t) + "</text>";
  }
  svg += "<text x='" + num(kLeft + w / 2) + "' y='" + num(c.height - 8) + "' text-anchor='middle'>" +
         html_escape(c.x_label) + "</text>";
  svg += "<text transform='translate(14," + num(kTop + h / 2) + ") rotate(-90)' text-anchor='middle'>" +
         html_escape(c.y_label) + (c.log_y ? " (log)" : "") + "</text>";
  for (const auto& [x, label] : c.rules) {
    svg += "<line x1='" + num(px(x)) + "' x2='" + num(px(x)) + "' y1='" + num(kTop) + "' y2='" + num(kTop + h) +
           "' stroke='#9467bd' stroke-dasharray='4 3'><title>" + html_escape(label) + "</title></line>";
  }
  int legend = 0;
  for (const LineSeries& s : c.series) {
    std::string path;
    bool pen_down = false;
    for (auto [x, y] : s.points) {
      if (!usable(y)) {
        pen_down = false;
        continue;
      }
      path += (pen_down ? " L" : " M") + num(px(x)) + " " + num(py(y));
      pen_down = true;
    }
    svg += "<path d='" + path + "' fill='none' stroke='" + s.color + "' stroke-width='1.5'/>";
    // The legend sits in the title row, right-aligned, so it never covers the data.
    const double lx = kLeft + w - 110.0 * static_cast<double>(c.series.size() - legend++), ly = 18;
    svg += "<line x1='" + num(lx) + "' x2='" + num(lx + 20) + "' y1='" + num(ly - 4) + "' y2='" + num(ly - 4) +
           "' stroke='" + s.color + "' stroke-width='3'/><text x='" + num(lx + 26) + "' y='" + num(ly) + "'>" +
           html_escape(s.name) + "</text>";
  }
  for (const ChartMarker& m : c.markers) {
    const double y = usable(m.y) ? py(m.y) : kTop + 6;  // a NaN loss sits at the top edge
    svg += "<circle cx='" + num(px(m.x)) + "' cy='" + num(y) + "' r='5' fill='none' stroke='" + m.color +
           "' stroke-width='2'><title>" + html_escape(m.label) + "</title></circle>";
  }
  return svg + "</svg>";
}

std::string render(const Heatmap& m) {
  constexpr int kLabelWidth = 330, kHeader = 30, kLegend = 40;
  const int width = kLabelWidth + m.cell_width * static_cast<int>(m.columns.size()) + 20;
  const int height = kHeader + m.cell_height * static_cast<int>(m.rows.size()) + kLegend;
  std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width) + "' height='" +
                    std::to_string(height) + "' role='img'><title>" + html_escape(m.title) + "</title>";
  svg += "<text x='4' y='18' class='chart-title'>" + html_escape(m.title) + "</text>";
  const double span = std::log10(m.high) - std::log10(m.low);
  auto colour_of = [&](double v) {
    if (!(v > m.low)) return std::string("#ffffff");
    return heat_colour((std::log10(std::min(v, m.high)) - std::log10(m.low)) / span);
  };
  for (std::size_t r = 0; r < m.rows.size(); ++r) {
    const int y = kHeader + m.cell_height * static_cast<int>(r);
    svg += "<text x='" + std::to_string(kLabelWidth - 6) + "' y='" + std::to_string(y + m.cell_height - 3) +
           "' text-anchor='end' class='row-label'>" + html_escape(m.rows[r]) + "</text>";
    for (std::size_t c = 0; c < m.columns.size(); ++c) {
      const double v = m.values[r][c];
      const int x = kLabelWidth + m.cell_width * static_cast<int>(c);
      char tip[64];
      std::snprintf(tip, sizeof tip, "step %.0f: %.3g", m.columns[c], v);
      svg += "<rect x='" + std::to_string(x) + "' y='" + std::to_string(y) + "' width='" + std::to_string(m.cell_width) +
             "' height='" + std::to_string(m.cell_height - 1) + "' fill='" +
             (std::isnan(v) ? std::string("#e6e6e6") : colour_of(v)) + "'><title>" + html_escape(m.rows[r]) + " " +
             (std::isnan(v) ? "step " + tick_label(m.columns[c]) + ": not sampled" : std::string(tip)) + "</title></rect>";
    }
  }
  // The axis: first and last step under the columns, and the colour legend.
  const int axis_y = kHeader + m.cell_height * static_cast<int>(m.rows.size()) + 14;
  if (!m.columns.empty()) {
    svg += "<text x='" + std::to_string(kLabelWidth) + "' y='" + std::to_string(axis_y) + "'>step " +
           tick_label(m.columns.front()) + "</text><text x='" + std::to_string(width - 20) + "' y='" +
           std::to_string(axis_y) + "' text-anchor='end'>step " + tick_label(m.columns.back()) + "</text>";
  }
  for (int i = 0; i <= 10; ++i) {
    const double v = std::pow(10.0, std::log10(m.low) + span * i / 10.0);
    svg += "<rect x='" + std::to_string(4 + 18 * i) + "' y='" + std::to_string(axis_y + 8) + "' width='18' height='10' fill='" +
           heat_colour(i / 10.0) + "' stroke='#ccc'><title>" + tick_label(v) + "</title></rect>";
  }
  svg += "<text x='" + std::to_string(4 + 18 * 11 + 6) + "' y='" + std::to_string(axis_y + 17) + "'>" +
         html_escape(m.value_label) + ": " + tick_label(m.low) + " .. " + tick_label(m.high) +
         " (log); grey: not sampled</text>";
  return svg + "</svg>";
}

}  // namespace fp8scope::report
