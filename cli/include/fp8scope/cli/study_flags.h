// The flags compare, advise and report share: where the history is, which scalar is the loss, and
// how spikes are found; plus the progress bar of their long reads.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "fp8scope/cli/connection_flags.h"
#include "fp8scope/history/history_reader.h"
#include "fp8scope/insight/run_study.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct StudyFlags {
  // Where the history is read: a daemon's Admin API (--endpoint), or --history (a SQLite file or
  // data dir, or a PostgreSQL URL), or --data-dir.
  std::string data_dir = "fp8scope-data";
  std::string history;
  std::string endpoint;        // "" = read the history directly
  ConnectionFlags connection;  // TLS, token and timeout for --endpoint
  std::string run, baseline;
  insight::StudyOptions options;
  bool progress = false;
};

// Where the history is: --data-dir, --history or --endpoint with its credentials.
void add_history_flags(CLI::App* cmd, StudyFlags& flags);
// --run is required; --baseline is required when baseline_required.
void add_study_flags(CLI::App* cmd, StudyFlags& flags, bool baseline_required);

// The history the flags name; an error line (prefixed with `command`) on `err` and nothing when it
// cannot be opened or reached.
std::unique_ptr<history::HistoryReader> open_history(const StudyFlags& flags, const char* command, std::ostream& err);

// Reads the history of flags.run (and its baseline) into a study; prints the error prefixed with
// `command` and returns nothing on failure. The progress bar shows on a terminal or with --progress.
std::optional<insight::RunStudy> load_study(const StudyFlags& flags, const char* command, std::ostream& err);

// "reading history [#######.......]  52% (13000/25000 records)" on one line, redrawn as it grows.
class ProgressBar {
 public:
  ProgressBar(std::ostream& out, std::string label, bool enabled);
  void update(std::uint64_t done, std::uint64_t total);
  void finish();

 private:
  std::ostream& out_;
  std::string label_;
  bool enabled_, drawn_ = false;
  int last_percent_ = -1;
};

}  // namespace fp8scope::cli
