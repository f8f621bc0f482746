// Which tensors changed at a loss spike or divergence onset: for each tensor and recipe, how far
// its underflow, overflow, saturation, error (MSE, 1 - cosine) and scale lag around the onset step moved from
// its own recent past, in robust sigmas of that past. The tensors that moved most come first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8scope/insight/early_warnings.h"
#include "fp8scope/insight/loss_signals.h"
#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

struct AttributionOptions {
  std::size_t before_samples = 20;  // sampled steps before the onset the "normal" comes from
  std::uint64_t lead_steps = 2;     // the onset window starts this many steps before the onset...
  std::uint64_t lag_steps = 0;      // ...and ends this many after it (0: one sampling interval)
  WarningOptions warnings;
};

struct Suspect {
  TensorKey tensor;
  RecipeKey recipe;
  std::string signal;       // underflow_ratio, overflow_ratio, saturation_ratio, mse, 1-cosine, scale_lag_log2
  double before = 0;        // the signal's median before the onset
  double at = 0;            // its worst value in the onset window
  double score = 0;         // (at - before) in robust sigmas of the past, on the signal's scale
  std::uint64_t at_step = 0;
  DataSource source = DataSource::kGemmOperand;  // what the figure at at_step came from
};

struct Attribution {
  std::uint64_t onset_step = 0;
  std::string cause;               // "spike" or "divergence"
  std::vector<Suspect> suspects;   // one per tensor (its strongest signal), highest score first
  std::vector<EarlyWarning> warnings;  // what had risen before the onset, longest lead first
};

Attribution attribute(const RunRecords& run, std::uint64_t onset_step, const std::string& cause,
                      const AttributionOptions& options = {});

// What load_run_records keeps whole so that attribute_onsets reads the same points from a thinned
// series as from the full one: for each onset, the before_samples sampled steps before its window
// and the first 8 in it (the whole window whenever it holds no more). The divergence and then the
// highest spikes first, as many as fit in another max_points points a series; later spikes read
// the strided sample.
SeriesLimits attribution_limits(const std::vector<Spike>& spikes, const std::optional<Divergence>& divergence,
                                const AttributionOptions& options, std::size_t max_points);

// One attribution per spike (at its start) and one for the divergence onset, in that order.
std::vector<Attribution> attribute_onsets(const RunRecords& run, const std::vector<Spike>& spikes,
                                          const std::optional<Divergence>& divergence,
                                          const AttributionOptions& options = {});

}  // namespace fp8scope::insight
