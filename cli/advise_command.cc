#include "fp8scope/cli/advise_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>

#include "fp8scope/insight/advice_formats.h"
#include "fp8scope/cli/connection_flags.h"

namespace fp8scope::cli {

void add_advise_command(CLI::App& app, AdviseOptions& o) {
  CLI::App* cmd = app.add_subcommand("advise", "What to do per layer and GEMM: keep FP8, rescale, tune, or fall back to BF16");
  add_study_flags(cmd, o.study, false);
  cmd->add_option("--format", o.format,
                  "table, te-yaml (TE debug API), te-recipe (a TE CustomRecipe with each GEMM's recipe, hybrid where "
                  "a layer's GEMMs differ), megatron (layers to keep in BF16) or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "te-yaml", "te-recipe", "megatron", "json"}));
  cmd->add_option("-o,--output", o.output, "Write to this file instead of stdout");
  cmd->add_option("--top", o.top, "Table rows (0: every tensor)")->capture_default_str();
  cmd->add_option("--te-features", o.te_features,
                  "te-yaml: also write these features TE's main branch does not have: autoswitch_gemm (TE PR #2883)")
      ->delimiter(',')
      ->check(CLI::IsMember({"autoswitch_gemm"}));
}

int run_advise(const AdviseOptions& o, std::ostream& out, std::ostream& err) {
  std::optional<insight::RunStudy> study = load_study(o.study, "advise", err);
  if (!study) return kUsage;
  std::ofstream file;
  if (!o.output.empty()) {
    file.open(o.output, std::ios::trunc);
    if (!file) {
      err << "fp8scope advise: -o " << o.output << ": cannot write there\n";
      return kUsage;
    }
  }
  std::ostream& to = o.output.empty() ? out : file;
  if (o.format == "te-yaml") {
    insight::TeYamlOptions te;
    te.autoswitch_gemm = std::find(o.te_features.begin(), o.te_features.end(), "autoswitch_gemm") != o.te_features.end();
    insight::write_te_debug_yaml(study->advice, to, te);
  } else if (o.format == "te-recipe") {
    insight::write_te_recipe(insight::te_recipe_plan(study->advice), o.study.run, to);
  } else if (o.format == "megatron") {
    insight::write_megatron_layers(study->advice, to);
  } else if (o.format == "json") {
    to << insight::advice_json(study->advice) << "\n";
  } else {
    to << "fp8scope advise: run " << o.study.run << ", " << study->records.tensors.size() << " tensors, "
       << study->onsets.size() << " loss onset(s)\n\n";
    insight::write_advice_table(study->advice, to, o.top);
  }
  to.flush();
  if (!to) {
    err << "fp8scope advise: writing " << (o.output.empty() ? "stdout" : o.output) << " failed\n";
    return kUsage;
  }
  if (!o.output.empty()) out << "wrote " << o.output << "\n";
  return 0;
}

}  // namespace fp8scope::cli
