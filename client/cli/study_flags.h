// The flags compare, advise and report share: where the history is, which scalar is the loss, and
// how spikes are found; plus the progress bar of their long reads.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>

#include "run_study.h"

namespace fp8scope::cli {

struct StudyFlags {
  std::string data_dir = "fp8scope-data";
  std::string run, baseline;
  insight::StudyOptions options;
  bool progress = false;
};

// --run is required; --baseline is required when baseline_required.
void add_study_flags(CLI::App* cmd, StudyFlags& flags, bool baseline_required);

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
