// `fp8scope checkpoint`: an FP8/FP4 export checked whole, one tensor at a time. The convention
// from config.json (or detected, and why), the structure (every quantized weight with its scales,
// nothing missing or orphaned, layers quantized as the config's ignore list says), each weight on
// its own and, with the reference weights it came from, against them; findings sorted worst
// first with one verdict line. Training's last scales and code fingerprints (history) are the
// inference check's (insight/inference_check.h), which the CLI runs on the export's weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fp8scope/checkpoint/checkpoint_files.h"
#include "fp8scope/checkpoint/conventions.h"
#include "fp8scope/checkpoint/weight_check.h"

namespace fp8scope::checkpoint {

struct CheckpointReport {
  std::string export_path, reference_path;
  Declaration declaration;
  std::vector<WeightReport> weights;                       // errors first, then warnings, then by name
  std::vector<std::pair<std::string, Finding>> structure;  // (tensor or file, finding) not of one weight
  std::size_t errors = 0, warnings = 0;
  std::uint64_t bytes = 0;  // of the export's tensors (and the reference's that were compared)
  double seconds = 0;

  std::string verdict() const;  // one line
};

// Progress: weights done of total.
using CheckpointProgress = std::function<void(std::size_t done, std::size_t total)>;

// `reference`: "" for none. An error only when a checkpoint cannot be opened or declares a
// convention fp8scope does not read; every problem of a weight is a finding.
Result<CheckpointReport> check_checkpoint(const std::string& export_path, const std::string& reference,
                                          const CheckpointProgress& progress = {});

}  // namespace fp8scope::checkpoint
