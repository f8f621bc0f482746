// `fp8scope report --data-dir DIR --run R [--baseline B] -o report.html`: the self-contained HTML
// report of a run (see study/report/include/fp8scope/report/html_report.h).
#pragma once

#include <ostream>
#include <string>

#include "fp8scope/cli/study_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct ReportCommandOptions {
  StudyFlags study;
  std::string output = "fp8scope-report.html";
};

void add_report_command(CLI::App& app, ReportCommandOptions& options);
// 0: written; 2: bad input (no history, no such run, an unwritable output).
int run_report(const ReportCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
