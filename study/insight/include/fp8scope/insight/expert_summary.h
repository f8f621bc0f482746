// A mixture-of-experts layer seen as its experts: which of them depart from the layer's others
// ("experts 3 and 17 of layers.12.mlp underflow 4x the layer's median"), and the experts x steps
// grids the report draws for the worst layers. Each expert is a tensor of its own in RunRecords
// (expert_layer_name); this is where they are put back together.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

// The statistics an expert is compared on, each under the caster that reads it (none: the what-if
// recipe that casts as the job did).
struct ExpertStatistic {
  StudiedStatistic statistic;
  std::optional<Caster> caster;
  const char* words;  // how a sentence says it
  double floor;       // values below this are nothing to see, whatever the median
};
const std::vector<ExpertStatistic>& expert_statistics();

struct ExpertOutlier {
  TensorKey tensor;                    // the MoE layer's (no expert in the name)
  std::string statistic;
  Caster caster = Caster::job();
  std::vector<std::int64_t> experts;   // the outliers, worst first
  std::vector<double> values;          // theirs: each the mean over its sampled steps
  double median = 0;                   // the median over every expert of the layer
  double factor = 0;                   // the worst one's value over the median (inf when it is 0)
  std::size_t experts_in_layer = 0;
  std::string sentence;                // "experts 3 and 17 of ... underflow 4.2x the layer's median (...)"
};

struct ExpertGrid {
  TensorKey tensor;
  std::string statistic;
  Caster caster = Caster::job();
  std::vector<std::int64_t> experts;          // rows, in expert order
  std::vector<std::uint64_t> steps;           // columns
  std::vector<std::vector<double>> values;    // experts x steps; NaN: not sampled (no tokens)
};

struct ExpertSummaryOptions {
  double factor = 4;         // an outlier's value against its layer's median
  std::size_t max_grids = 4;
};

// Outliers, the largest factor first.
std::vector<ExpertOutlier> expert_outliers(const RunRecords& run, const ExpertSummaryOptions& options = {});

// Grids of the outliers' tensors and statistics first, then of the MoE tensors whose worst expert
// underflows most, up to options.max_grids.
std::vector<ExpertGrid> expert_grids(const RunRecords& run, const std::vector<ExpertOutlier>& outliers,
                                     const ExpertSummaryOptions& options = {});

}  // namespace fp8scope::insight
