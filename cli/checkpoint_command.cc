#include "fp8scope/cli/checkpoint_command.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>

#include "fp8scope/checkpoint/checkpoint_check.h"
#include "fp8scope/checkpoint/training_check.h"
#include "fp8scope/insight/inference_check.h"
#include "fp8scope/report/checkpoint_page.h"
#include "fp8scope/vocabulary/printable_text.h"

namespace fp8scope::cli {
namespace {

constexpr int kWrong = 1;

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json finding_json(const std::string& where, const checkpoint::Finding& f) {
  return {{"tensor", where}, {"severity", checkpoint::severity_name(f.severity)}, {"code", f.code}, {"message", f.message}};
}

nlohmann::json weight_json(const checkpoint::WeightReport& w) {
  nlohmann::json findings = nlohmann::json::array();
  for (const checkpoint::Finding& f : w.findings) findings.push_back(finding_json(w.module, f));
  nlohmann::json j = {{"module", w.module}, {"severity", checkpoint::severity_name(w.severity)}, {"verdict", w.verdict},
                      {"codes_dtype", w.codes_dtype}, {"scales", w.scale_layout}, {"shape", w.shape},
                      {"numel", w.numel}, {"nonfinite_codes", w.nonfinite_codes}, {"codes_at_max", w.codes_at_max},
                      {"amax", number(w.amax)}, {"amin", number(w.amin)}, {"dynamic_range_log2", number(w.dynamic_range_log2)},
                      {"scale_min", number(w.scale_min)}, {"scale_max", number(w.scale_max)},
                      {"scales_at_floor", w.scales_at_floor}, {"scales_at_ceiling", w.scales_at_ceiling},
                      {"findings", findings}};
  if (w.compared) {
    j["reference"] = {{"tensor", w.reference},         {"mse", number(w.mse)},
                      {"cosine", number(w.cosine)},    {"sqnr_db", number(w.sqnr_db)},
                      {"max_abs_error", number(w.max_abs_error)}, {"relative_error", number(w.relative_error)},
                      {"codes_differing", w.codes_differing}, {"codes_off_by_more_than_one", w.codes_off_by_more},
                      {"scales_differing", w.scales_differing}};
  }
  return j;
}

void print_json(const checkpoint::CheckpointReport& r, const std::optional<insight::InferenceCheck>& training,
                std::ostream& out) {
  const checkpoint::ConventionInfo& c = checkpoint::convention_info(r.declaration.convention);
  nlohmann::json structure = nlohmann::json::array(), weights = nlohmann::json::array();
  for (const auto& [where, f] : r.structure) structure.push_back(finding_json(where, f));
  for (const checkpoint::WeightReport& w : r.weights) weights.push_back(weight_json(w));
  nlohmann::json j = {{"export", r.export_path}, {"reference", r.reference_path}, {"convention", c.name},
                      {"declared", r.declaration.declared}, {"why", r.declaration.why}, {"rules_from", c.loader},
                      {"verdict", r.verdict()}, {"errors", r.errors}, {"warnings", r.warnings}, {"bytes", r.bytes},
                      {"seconds", r.seconds}, {"structure", structure}, {"weights", weights}};
  if (training) {
    nlohmann::json checks = nlohmann::json::array();
    for (const insight::WeightCheck& w : training->weights) {
      checks.push_back({{"layer", w.tensor.layer}, {"verdict", insight::weight_verdict_name(w.verdict)},
                        {"scale", number(w.scale)}, {"training_scale", number(w.training_scale)}, {"detail", w.detail}});
    }
    j["training"] = {{"run", training->training}, {"flagged", training->flagged}, {"weights", checks}};
  }
  out << j.dump() << "\n";
}

void print_table(const checkpoint::CheckpointReport& r, const std::optional<insight::InferenceCheck>& training,
                 std::ostream& out) {
  const checkpoint::ConventionInfo& c = checkpoint::convention_info(r.declaration.convention);
  // Names and messages come from the files: printed escaped (printable_text.h).
  out << "convention " << c.name << (r.declaration.declared ? " (declared: " : " (detected: ")
      << printable(r.declaration.why) << ")\n"
      << "rules from " << c.loader << "\n";
  for (const auto& [where, f] : r.structure) {
    out << checkpoint::severity_name(f.severity) << "  " << f.code << "  " << printable(where) << ": "
        << printable(f.message) << "\n";
  }
  char line[512];
  std::snprintf(line, sizeof line, "\n%-8s %-20s %-44s %-9s %-16s %9s %8s %10s %10s\n", "severity", "verdict", "weight",
                "codes", "scales", "cosine", "SQNR dB", "rel. err", "codes off");
  out << line;
  for (const checkpoint::WeightReport& w : r.weights) {
    auto figure = [&](double v, const char* fmt) {
      char t[32];
      std::snprintf(t, sizeof t, fmt, v);
      return w.compared ? std::string(t) : std::string("-");
    };
    std::snprintf(line, sizeof line, "%-8s %-20s %-44s %-9s %-16s %9s %8s %10s %10s\n", checkpoint::severity_name(w.severity),
                  w.verdict.c_str(), printable(w.module).c_str(), w.codes_dtype.c_str(), w.scale_layout.c_str(),
                  figure(w.cosine, "%.6f").c_str(), figure(w.sqnr_db, "%.1f").c_str(),
                  figure(w.relative_error, "%.3g").c_str(),
                  w.compared ? std::to_string(w.codes_differing).c_str() : "-");
    out << line;
    for (const checkpoint::Finding& f : w.findings) out << "         " << f.code << ": " << printable(f.message) << "\n";
  }
  if (training) {
    out << "\nagainst training run " << printable(training->training) << ": " << training->flagged << " of "
        << training->weights.size() << " FP8 weights differ from what it ended with\n";
    for (const insight::WeightCheck& w : training->weights) {
      out << "  " << insight::weight_verdict_name(w.verdict) << "  " << printable(w.tensor.layer) << ": "
          << printable(w.detail) << "\n";
    }
  }
  out << "\nverdict: " << printable(r.verdict()) << "\n";
}

// The export's per-tensor FP8 weights against the scales and fingerprints training ended with.
std::optional<insight::InferenceCheck> against_training(const CheckpointOptions& o, std::ostream& err, bool& failed) {
  failed = false;
  if (o.history.run.empty()) return std::nullopt;
  std::unique_ptr<history::HistoryReader> history = open_history(o.history, "checkpoint", err);
  Result<insight::RunRecords> training =
      history ? insight::load_run_records(*history, o.history.run) : Result<insight::RunRecords>(Status::error(""));
  if (!training.ok()) {
    if (history) err << "fp8scope checkpoint: --run " << o.history.run << ": " << training.message() << "\n";
    failed = true;
    return std::nullopt;
  }
  Result<checkpoint::ExportRun> exported = checkpoint::export_as_run(o.export_path, training.value());
  if (!exported.ok()) {
    err << "fp8scope checkpoint: " << exported.message() << "\n";
    failed = true;
    return std::nullopt;
  }
  std::optional<insight::InferenceCheck> check = insight::check_inference(exported.value().records, training.value());
  if (check) check->run = "export";
  return check;
}

}  // namespace

void add_checkpoint_command(CLI::App& app, CheckpointOptions& o) {
  CLI::App* cmd = app.add_subcommand("checkpoint",
                                     "Verify an FP8/FP4 checkpoint export as serving engines load it: its structure, its "
                                     "scales and codes, against the weights it came from and what training ended with");
  cmd->add_option("export", o.export_path, "The export: a directory of .safetensors shards (config.json, index) or a file")
      ->required();
  cmd->add_option("--reference", o.reference, "The BF16 or FP32 checkpoint the export was made from");
  cmd->add_option("--run", o.history.run, "A training run in the history: hold the export to the scales it ended with");
  add_history_flags(cmd, o.history);
  cmd->add_flag("--json", o.json, "One JSON object");
  cmd->add_option("-o,--output", o.output, "Also write an HTML report here");
  cmd->add_flag("--progress", o.progress, "Show the progress bar even when stderr is no terminal");
}

int run_checkpoint(const CheckpointOptions& o, std::ostream& out, std::ostream& err) {
  ProgressBar bar(err, "checking weights", o.progress || isatty(STDERR_FILENO));
  Result<checkpoint::CheckpointReport> report = checkpoint::check_checkpoint(
      o.export_path, o.reference, [&](std::size_t done, std::size_t total) { bar.update(done, total); });
  bar.finish();
  if (!report.ok()) {
    err << "fp8scope checkpoint: " << report.message() << "\n";
    return kUsage;
  }
  bool failed = false;
  const std::optional<insight::InferenceCheck> training = against_training(o, err, failed);
  if (failed) return kUsage;
  if (o.json) {
    print_json(report.value(), training, out);
  } else {
    print_table(report.value(), training, out);
  }
  if (!o.output.empty()) {
    std::ofstream page(o.output);
    page << report::checkpoint_page(report.value(), training, std::string("fp8scope ") + FP8SCOPE_VERSION);
    if (!page) {
      err << "fp8scope checkpoint: cannot write " << o.output << "\n";
      return kUsage;
    }
  }
  const bool wrong = report.value().errors > 0 || (training && training->flagged > 0);
  return wrong ? kWrong : 0;
}

}  // namespace fp8scope::cli
