// One sample's analysis as a value, before anything is published: the policy's what-if recipes
// on a high-precision tensor (delayed scaling from the tensor's own amax history, TE's update
// order), or what a job's own low-precision codes show (Caster::job(): with their per-tensor
// scale or their block scales, as the GEMM read them). No metric, table or store is touched here.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fp8scope/kernels/block_dynamic_range.h"
#include "fp8scope/kernels/channel_summary.h"
#include "fp8scope/kernels/delayed_scaling.h"
#include "fp8scope/kernels/stats_engine.h"
#include "fp8scope/analysis/channel_persistence.h"
#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/analysis/lru_map.h"
#include "fp8scope/ingest/sample.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "fp8scope/vocabulary/cast_capture.h"
#include "fp8scope/vocabulary/caster.h"

namespace fp8scope::server {

// What one recipe, or the job's own cast, did to the sample.
struct RecipeOutcome {
  Caster caster = Caster::job();
  CastFormat format = CastFormat::kE4M3;
  std::optional<double> scale;  // the one scale of a per-tensor recipe, or of per-tensor codes
  double scale_min = 0, scale_max = 0;
  QuantStats stats;
  ScaleLayout scale_layout = ScaleLayout::kNone;  // observed: how the job's scales were laid out
  std::string codes_digest;  // hex FNV-1a of FP8 codes: the job's own, or a weight's current-scaling cast
  // What the figures were computed from: the job's codes alone, a high-precision GEMM operand, or the
  // input of the job's own cast (captured, or recomputed from a fused kernel's inputs).
  DataSource source = DataSource::kGemmOperand;
  std::optional<RecipeKind> job_recipe;  // the job's own cast: fp8scope's name for its recipe

  bool block_scaled() const { return scale_layout != ScaleLayout::kNone && scale_layout != ScaleLayout::kTensorScalar; }
  // The job's codes held against the tensor they were cast from: what-if statistics apply.
  bool referenced() const { return source == DataSource::kCastInput || source == DataSource::kRecomputed; }
};

// The rows past an expert's tokens (SampleHeader::valid_rows): padding, which must be zero. A
// nonzero or non-finite value there reaches valid rows downstream (a block scale, a wgrad sum).
struct PaddingCensus {
  std::uint64_t values = 0, nonzero = 0, nonfinite = 0;
};

struct SampleAnalysis {
  TensorMoments moments;
  float te_amax = 0.0f;
  std::vector<RecipeOutcome> recipes;
  PaddingCensus padding;  // statistics and recipes read the valid rows only
  ChannelSummary channels;  // of an activation's columns or a weight's rows (what-ifs only)
  bool cast_noop = false;   // the sample's cast wrote nothing (its no-op flag): analyzed as codes alone
  // NVFP4 codes whose per-tensor factor the sample did not carry (a GEMM folds it into alpha with
  // the other operand's, and a row-scaled GEMM's are per row): the figures in the tensor's unit
  // are relative to that factor (Statistic::in_tensor_units).
  bool relative_values = false;
  // TE's max_blockwise_dynamic_range of the high-precision tensor, for the policy's block shapes.
  std::vector<BlockRangeValue> block_ranges;
};

class SampleAnalyzer {
 public:
  // Delayed-scaling histories and outlier channels are kept for the `max_tensors` most recently
  // sampled (tensor, format)s and tensors.
  SampleAnalyzer(StatsEngine& engine, std::size_t max_tensors, OutlierChannelOptions channels = {})
      : engine_(engine), channel_options_(channels), delayed_(max_tensors), channels_(max_tensors) {}

  Result<SampleAnalysis> analyze(const Sample& s, const SamplingPolicy& policy);

 private:
  Result<SampleAnalysis> what_ifs(const Sample& s, const SamplingPolicy& policy);
  Result<SampleAnalysis> observed(const Sample& s);
  // The job's own cast against its captured input, and the policy's what-ifs on that input.
  Result<SampleAnalysis> cast(const Sample& s, const SamplingPolicy& policy);
  // The policy's recipes on a high-precision tensor (`view`): appended to `plans`, with delayed
  // scaling's state where a plan needs it (else null), index for index. Those TE would refuse on
  // it are left out (refused_once).
  void add_what_if_plans(const Sample& s, const SamplingPolicy& policy, const TensorView& view,
                         std::vector<RecipePlan>& plans, std::vector<std::shared_ptr<DelayedScalingState>>& delayed);
  void refused_once(const std::string& why);
  // The what-ifs' outcomes from report.recipes[first...], and the tensor's moments and channels.
  void add_what_ifs(const Sample& s, const TensorView& view, const TensorReport& report, std::size_t first,
                    const std::vector<std::shared_ptr<DelayedScalingState>>& delayed, SampleAnalysis& a);
  std::shared_ptr<DelayedScalingState> delayed_state(const Sample& s, const Recipe& recipe, CastFormat format);
  std::vector<std::uint32_t> persistent_channels(const Sample& s, const std::vector<std::uint32_t>& outliers);

  StatsEngine& engine_;
  OutlierChannelOptions channel_options_;
  std::mutex delayed_mu_;
  // By job, run, rank, layer, expert, gemm, operand and format: TE keeps one history per quantized tensor.
  // Shared: an entry forgotten while a sample uses it lives until that sample is done.
  LruMap<std::string, std::shared_ptr<DelayedScalingState>> delayed_;
  std::mutex channels_mu_;
  std::mutex refused_mu_;
  std::set<std::string> refused_;  // the reasons logged, at most 64
  LruMap<std::string, ChannelPersistence> channels_;  // by tensor, as delayed_ less the format
};

}  // namespace fp8scope::server
