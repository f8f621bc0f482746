#include "fp8scope/report/html_parts.h"

#include <cmath>
#include <cstdio>

#include "fp8scope/report/svg_chart.h"

namespace fp8scope::report {
namespace {

const char* kStyle = R"css(
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; padding: 10px; border: 1px solid #e2e2e2; overflow-x: auto; font-size: 12px; }
svg text { font-size: 11px; fill: #333; } svg .chart-title { font-size: 13px; font-weight: bold; }
.verdict-bad { color: #b00020; font-weight: bold; } .verdict-ok { color: #1b7f3b; font-weight: bold; }
.risk { display: inline-block; height: 10px; background: #d62728; vertical-align: middle; }
.muted { color: #777; }
)css";

}  // namespace

const char* report_style() { return kStyle; }

std::string number(double v, const char* fmt) {
  if (!std::isfinite(v)) return std::isnan(v) ? "-" : (v > 0 ? "inf" : "-inf");
  char text[48];
  std::snprintf(text, sizeof text, fmt, v);
  return text;
}

std::string cell(const std::string& text, bool numeric) {
  return std::string(numeric ? "<td class='num'>" : "<td>") + html_escape(text) + "</td>";
}

void inference_check_section(const insight::InferenceCheck& c, std::ostringstream& out) {
  out << "<h2>Inference check</h2><p class='" << (c.flagged ? "verdict-bad" : "verdict-ok") << "'>"
      << (c.flagged ? std::to_string(c.flagged) + " of " + std::to_string(c.weights.size()) +
                          " FP8 weights of run " + html_escape(c.run) + " differ from what training run " +
                          html_escape(c.training) + " ended with"
                    : "Every FP8 weight of run " + html_escape(c.run) + " matches training run " +
                          html_escape(c.training) + "'s scale and codes")
      << "</p><table><tr><th>layer</th><th>verdict</th><th>format</th><th>scale</th><th>training scale</th>"
         "<th>training source</th><th>detail</th></tr>";
  for (const insight::WeightCheck& w : c.weights) {
    out << "<tr>" << cell(w.tensor.layer) << cell(insight::weight_verdict_name(w.verdict))
        << cell(w.format != nullptr ? w.format->name : "") << cell(number(w.scale, "%.7g"), true) << cell(number(w.training_scale, "%.7g"), true)
        << cell(w.training_source ? w.training_source->name() : "") << cell(w.detail) << "</tr>";
  }
  out << "</table>";
  if (c.outputs.empty()) return;
  out << "<h3>FP8 GEMM outputs against BF16 outputs (the daemon's GEMM check)</h3><table><tr><th>layer</th>"
         "<th>accumulate</th><th>cosine, run</th><th>MSE, run</th><th>cosine, training</th><th>MSE, training</th></tr>";
  for (const insight::OutputCheck& x : c.outputs) {
    out << "<tr>" << cell(x.layer) << cell(x.accumulate) << cell(number(x.run_cosine, "%.6g"), true)
        << cell(number(x.run_mse), true) << cell(number(x.training_cosine, "%.6g"), true)
        << cell(number(x.training_mse), true) << "</tr>";
  }
  out << "</table>";
}

}  // namespace fp8scope::report
