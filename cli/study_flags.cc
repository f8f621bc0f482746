#include "fp8scope/cli/study_flags.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

namespace fp8scope::cli {

void add_history_flags(CLI::App* cmd, StudyFlags& f) {
  CLI::Option* data_dir =
      cmd->add_option("--data-dir", f.data_dir, "fp8scoped's --data-dir (read only)")->capture_default_str();
  CLI::Option* history =
      cmd->add_option("--history", f.history,
                      "The history to read: a SQLite file or data dir, or postgresql://user@host:port/database for "
                      "a whole job's")
          ->envname("FP8SCOPE_HISTORY");
  // --endpoint here is only the flag (not FP8SCOPE_ENDPOINT): a file next to you is not silently
  // traded for a daemon's history because the environment names one.
  cmd->add_option("--endpoint", f.endpoint,
                  "Read the history through this fp8scoped's Admin API instead (unix:///path.sock or HOST:PORT)")
      ->excludes(data_dir)
      ->excludes(history);
  add_credential_flags(cmd, f.connection);
}

void add_study_flags(CLI::App* cmd, StudyFlags& f, bool baseline_required) {
  cmd->add_option("--run", f.run, "The run under study (e.g. the FP8 run)")->required();
  CLI::Option* baseline = cmd->add_option("--baseline", f.baseline, "The run it is held against (e.g. the BF16 run)");
  if (baseline_required) baseline->required();
  add_history_flags(cmd, f);
  cmd->add_option("--name", f.options.loss_name, "The scalar that is the loss")->capture_default_str();
  cmd->add_option("--window", f.options.spikes.window, "Steps of the trailing window a spike is measured against")
      ->capture_default_str()
      ->check(CLI::Range(5, 100000));
  cmd->add_option("--threshold", f.options.spikes.threshold, "Robust z-score of log-loss that makes a spike")
      ->capture_default_str()
      ->check(CLI::Range(2.0, 100.0));
  cmd->add_option("--series-points", f.options.series_points,
                  "Points kept of each tensor's series (a strided sample past it, onset windows whole); 0 keeps every point")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 32));
  cmd->add_flag("--progress", f.progress, "Show the progress bar of the history read even when stderr is no terminal");
}

std::unique_ptr<history::HistoryReader> open_history(const StudyFlags& f, const char* command, std::ostream& err) {
  ConnectionFlags daemon = f.connection;
  daemon.options.endpoint = f.endpoint;
  auto reader = open_history_source(f.endpoint.empty() ? (f.history.empty() ? f.data_dir : f.history) : "", daemon);
  if (!reader.ok()) {
    err << "fp8scope " << command << ": " << reader.message() << "\n";
    return nullptr;
  }
  return std::move(reader).value();
}

std::optional<insight::RunStudy> load_study(const StudyFlags& f, const char* command, std::ostream& err) {
  std::unique_ptr<history::HistoryReader> history = open_history(f, command, err);
  if (!history) return std::nullopt;
  ProgressBar bar(err, "reading history", f.progress || isatty(STDERR_FILENO));
  auto study = insight::study_run(*history, f.run, f.baseline, f.options,
                                  [&](std::uint64_t done, std::uint64_t total) { bar.update(done, total); });
  bar.finish();
  if (!study.ok()) {
    err << "fp8scope " << command << ": " << study.message() << "\n";
    return std::nullopt;
  }
  for (const insight::RunRecords* r : {&study.value().records, study.value().baseline_records ? &*study.value().baseline_records : nullptr}) {
    if (r != nullptr && !insight::thinning_note(*r).empty()) err << "fp8scope " << command << ": " << insight::thinning_note(*r) << "\n";
  }
  return std::move(study).value();
}

ProgressBar::ProgressBar(std::ostream& out, std::string label, bool enabled)
    : out_(out), label_(std::move(label)), enabled_(enabled) {}

void ProgressBar::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || total == 0) return;
  const int percent = static_cast<int>(100 * std::min(done, total) / total);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  constexpr int kWidth = 30;
  const int filled = percent * kWidth / 100;
  out_ << "\r" << label_ << " [" << std::string(static_cast<std::size_t>(filled), '#')
       << std::string(static_cast<std::size_t>(kWidth - filled), '.') << "] " << (percent < 10 ? "  " : percent < 100 ? " " : "")
       << percent << "% (" << done << "/" << total << " records)" << std::flush;
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace fp8scope::cli
