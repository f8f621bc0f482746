// Every statistic fp8scope reports, one row each: its name, unit, help text and how it is derived
// from the accumulators of stats.h. The CLI's JSON keys, the daemon's metric names and the
// dashboards all come from this table, so a statistic is declared exactly once.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "fp8scope/kernels/channel_summary.h"
#include "fp8scope/kernels/stats.h"

namespace fp8scope {

// What a statistic describes: the tensor alone, or one recipe's cast of it: the cast of a
// high-precision tensor (a what-if's, or the job's own where its cast was captured with its input),
// the job's own block scales, either cast, or the check of fp8scope's model against the job's
// captured cast.
enum class StatisticScope : std::uint8_t { kTensor, kWhatIf, kObserved, kRecipe, kCastCheck };

struct Statistic {
  const char* key;          // JSON key, and the metric name after "fp8scope_" unless `metric` says otherwise
  const char* metric;       // Prometheus name without the prefix; nullptr: the same as key
  const char* unit;         // "ratio" (0..1), "elements", "channels", "value" (the tensor's own unit), "dB", "log2", "1"
  const char* help;
  StatisticScope scope;
  bool lower_is_worse;      // how ranks combine into one series: the worst rank (min here, else max)
  // NaN when undefined (e.g. the mean of a tensor with no finite element). A statistic derives
  // from the moments and a cast, or (outlier channels) from the channel amaxes alone.
  double (*compute)(const TensorMoments& m, const QuantStats& q);
  double (*from_channels)(const ChannelSummary& c) = nullptr;

  double value(const TensorMoments& m, const QuantStats& q, const ChannelSummary& c) const {
    return from_channels ? from_channels(c) : compute(m, q);
  }
  const char* metric_name() const { return metric ? metric : key; }
  // In the tensor's own unit (amax, mean, mse, ...): it scales with the tensor, so it is only
  // relative where the tensor's per-tensor factor is not known (HistoryRecord::relative_values).
  bool in_tensor_units() const { return std::string_view(unit) == "value"; }
  bool per_channel() const { return from_channels != nullptr; }
  bool per_recipe() const { return scope != StatisticScope::kTensor; }
  // Whether the statistic means something for a recipe's result (job: the job's own codes, with
  // their high-precision input when `referenced`; the job-only statistics describe block scales,
  // which one per-tensor scale has not).
  bool applies_to(bool job, bool block_scaled = true, bool referenced = false) const {
    switch (scope) {
      case StatisticScope::kObserved: return job && block_scaled;
      case StatisticScope::kWhatIf: return !job || referenced;
      case StatisticScope::kCastCheck: return job && referenced;
      case StatisticScope::kRecipe: return true;
      case StatisticScope::kTensor: break;
    }
    return false;
  }
};

std::span<const Statistic> statistics();
const Statistic* find_statistic(std::string_view key);

}  // namespace fp8scope
