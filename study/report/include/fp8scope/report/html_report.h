// `fp8scope report`: one self-contained HTML file (inline CSS and SVG, no script, no network) of
// what fp8scope concludes about a run: the loss curves with spikes marked, the tensors that moved
// at each onset, the advice table with its TE debug-API YAML and Megatron list, the inference
// check when the run used FP8 weights its baseline trained, heatmaps of
// underflow and overflow per tensor and step, experts x steps for mixture-of-experts layers, and
// delayed against current scale.
#pragma once

#include <string>

#include "fp8scope/insight/run_study.h"

namespace fp8scope::report {

struct ReportOptions {
  std::string history, generated_by;  // shown in the header (history: where it was read)
  std::size_t heatmap_rows = 40;        // the riskiest tensors
  std::size_t heatmap_columns = 150;    // sampled steps are bucketed down to this many
  std::size_t scale_plots = 4;          // tensors whose delayed and current scales are drawn
};

std::string html_report(const insight::RunStudy& study, const ReportOptions& options);

}  // namespace fp8scope::report
