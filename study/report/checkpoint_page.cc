#include "fp8scope/report/checkpoint_page.h"

#include <sstream>

#include "fp8scope/report/html_parts.h"
#include "fp8scope/report/svg_chart.h"

namespace fp8scope::report {
namespace {

std::string findings_text(const checkpoint::WeightReport& w) {
  std::string text;
  for (const checkpoint::Finding& f : w.findings) text += (text.empty() ? "" : "; ") + f.message;
  return text;
}

void weights_table(const checkpoint::CheckpointReport& r, std::ostringstream& out) {
  out << "<h2>Weights</h2><table><tr><th>weight</th><th>severity</th><th>verdict</th><th>codes</th><th>scales</th>"
         "<th>amax</th><th>codes at +-max</th><th>cosine</th><th>SQNR dB</th><th>relative error</th><th>codes off</th>"
         "<th>detail</th></tr>";
  for (const checkpoint::WeightReport& w : r.weights) {
    out << "<tr>" << cell(w.module) << cell(checkpoint::severity_name(w.severity)) << cell(w.verdict)
        << cell(w.codes_dtype) << cell(w.scale_layout) << cell(number(w.amax), true)
        << cell(std::to_string(w.codes_at_max), true) << cell(w.compared ? number(w.cosine, "%.6f") : "-", true)
        << cell(w.compared ? number(w.sqnr_db, "%.1f") : "-", true)
        << cell(w.compared ? number(w.relative_error) : "-", true)
        << cell(w.compared ? std::to_string(w.codes_differing) : "-", true) << cell(findings_text(w)) << "</tr>";
  }
  out << "</table>";
}

}  // namespace

std::string checkpoint_page(const checkpoint::CheckpointReport& r, const std::optional<insight::InferenceCheck>& training,
                            const std::string& generated_by) {
  std::ostringstream out;
  const std::string title = "fp8scope checkpoint: " + r.export_path;
  const checkpoint::ConventionInfo& c = checkpoint::convention_info(r.declaration.convention);
  out << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>" << html_escape(title)
      << "</title><style>" << report_style() << "</style></head><body><h1>" << html_escape(title) << "</h1>"
      << "<p class='" << (r.errors ? "verdict-bad" : "verdict-ok") << "'>" << html_escape(r.verdict()) << "</p>"
      << "<p class='muted'>convention " << c.name << " (" << (r.declaration.declared ? "declared: " : "detected: ")
      << html_escape(r.declaration.why) << "); rules from " << html_escape(c.loader) << "; reference "
      << html_escape(r.reference_path.empty() ? std::string("none") : r.reference_path) << "; "
      << html_escape(generated_by) << "</p>";
  if (!r.structure.empty()) {
    out << "<h2>Structure</h2><table><tr><th>tensor or file</th><th>severity</th><th>finding</th><th>detail</th></tr>";
    for (const auto& [where, f] : r.structure) {
      out << "<tr>" << cell(where) << cell(checkpoint::severity_name(f.severity)) << cell(f.code) << cell(f.message) << "</tr>";
    }
    out << "</table>";
  }
  weights_table(r, out);
  if (training) inference_check_section(*training, out);
  out << "</body></html>\n";
  return out.str();
}

}  // namespace fp8scope::report
