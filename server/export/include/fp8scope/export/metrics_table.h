// Every metric fp8scoped exports, one row each: name, type, help, base unit and labels. The tensor
// statistics come from kernels' statistics table, so a statistic is named once for the CLI, the
// metrics, the history and the dashboards; tests check dashboards and alert rules against this
// table (`fp8scoped --print-metrics-table` prints it as JSON).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/kernels/statistics_table.h"

namespace fp8scope::server {

enum class MetricKind { kGauge, kCounter, kHistogram };

struct MetricDef {
  std::string name;                 // with the fp8scope_ prefix
  MetricKind kind = MetricKind::kGauge;
  std::string help;
  std::string unit;                 // base unit: "ratio", "seconds", "bytes", "samples", ...
  std::vector<std::string> labels;  // allowed labels; tensor series add "rank" with --per-rank-metrics
  const Statistic* statistic = nullptr;  // set for tensor statistics
  bool lower_is_worse = false;      // how ranks combine: the worst rank's value
};

// Label sets.
inline const std::vector<std::string> kTensorLabels = {"job", "layer", "gemm", "operand"};
inline const std::vector<std::string> kRecipeLabels = {"job", "layer", "gemm", "operand", "format", "recipe"};

const std::vector<MetricDef>& metric_definitions();
const MetricDef* find_metric(std::string_view name);
const char* kind_name(MetricKind kind);

// The table as JSON: [{name, type, help, unit, labels, worst_rank (tensor statistics: max or min)}, ...].
std::string metrics_table_json();

}  // namespace fp8scope::server
