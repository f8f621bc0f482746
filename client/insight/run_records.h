// A run's sampled statistics out of the history, grouped per tensor (layer, gemm, operand) and per
// recipe and format, in step order: what attribution, advice and the report read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fp8scope/status.h"
#include "fp8scope/history/history_reader.h"

namespace fp8scope::insight {

struct TensorKey {
  std::string layer, gemm, operand;
  auto operator<=>(const TensorKey&) const = default;
  std::string name() const { return layer + " " + gemm + " " + operand; }
};

struct RecipeKey {
  std::string recipe, format;  // recipe name, or "observed" for the FP8 data the job really cast
  auto operator<=>(const RecipeKey&) const = default;
};

struct RecordPoint {
  std::uint64_t step = 0;
  double scale = 0, scale_current = 0;
  double scale_max = 0;            // block-scaled codes: the largest block scale (scale is the smallest)
  std::vector<double> statistics;  // in statistics() order
  std::string codes_digest;        // see HistoryRecord
};

struct TensorRecords {
  std::string dtype;                                       // as captured (bf16, e4m3, e2m1, ...)
  std::map<RecipeKey, std::vector<RecordPoint>> recipes;   // each in step order, the lowest rank per step
  std::string scale_layout;  // the job's own block-scale layout (scale_layout.h's name); "" = per-tensor or none

  // The series of `recipe` (its first format), and that format; nullptr when not sampled.
  const std::vector<RecordPoint>* find(const std::string& recipe, std::string* format = nullptr) const;
  // The what-if recipe that casts as the job cast this tensor: the block recipe of its scale layout
  // (mxfp8 or mxfp4, nvfp4, block_1x128, block_128x128), else tensor_current.
  const char* matching_recipe() const;
  bool block_scaled() const { return !scale_layout.empty(); }
};

// The daemon's GEMM check of a layer at one step (one accumulation mode).
struct GemmOutputPoint {
  std::uint64_t step = 0;
  double mse = 0, cosine = 0, max_rel_error = 0;
};

struct RunRecords {
  std::string run;
  std::map<TensorKey, TensorRecords> tensors;
  // layer -> accumulate -> its checks in step order, the lowest rank per step.
  std::map<std::string, std::map<std::string, std::vector<GemmOutputPoint>>> gemm_outputs;
  std::uint64_t records = 0;
  std::uint64_t sampling_interval = 1;  // the median gap between sampled steps
};

// Reads every record of `run`; progress(done, total) is called as rows arrive (total from a count
// taken first). An error when the run has no records.
Result<RunRecords> load_run_records(const history::HistoryReader& history, const std::string& run,
                                    const std::function<void(std::uint64_t, std::uint64_t)>& progress = nullptr);

// The value of statistic `key` in a point (NaN when the record has none).
double statistic(const RecordPoint& p, const char* key);

}  // namespace fp8scope::insight
