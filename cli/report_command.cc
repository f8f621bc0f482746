#include "fp8scope/cli/report_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fp8scope/cli/connection_flags.h"
#include "fp8scope/report/html_report.h"

namespace fp8scope::cli {

void add_report_command(CLI::App& app, ReportCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand("report", "One self-contained HTML report of a run (and its baseline)");
  add_study_flags(cmd, o.study, false);
  cmd->add_option("-o,--output", o.output, "The HTML file to write")->capture_default_str();
}

int run_report(const ReportCommandOptions& o, std::ostream& out, std::ostream& err) {
  std::optional<insight::RunStudy> study = load_study(o.study, "report", err);
  if (!study) return kUsage;
  report::ReportOptions options;
  options.history = study->source;
  options.generated_by = "written by fp8scope report";
  const std::string html = report::html_report(*study, options);
  // Written beside the target and renamed, so a reader never sees half a report.
  const std::string partial = o.output + ".partial";
  {
    std::ofstream file(partial, std::ios::binary | std::ios::trunc);
    file << html;
    file.flush();
    if (!file) {
      err << "fp8scope report: -o " << o.output << ": cannot write there\n";
      std::remove(partial.c_str());
      return kUsage;
    }
  }
  std::error_code ec;
  std::filesystem::rename(partial, o.output, ec);
  if (ec) {
    err << "fp8scope report: -o " << o.output << ": " << ec.message() << "\n";
    return kUsage;
  }
  out << "wrote " << o.output << " (" << html.size() / 1024 << " KiB): run " << o.study.run;
  if (study->comparison) out << " against " << o.study.baseline << (study->comparison->run_worse ? ", worse" : ", no worse");
  out << "; " << study->onsets.size() << " loss onset(s); top tensor: "
      << (study->advice.tensors.empty() ? std::string("-") : study->advice.tensors.front().tensor.name()) << "\n";
  return 0;
}

}  // namespace fp8scope::cli
