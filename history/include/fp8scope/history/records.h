// What the history keeps: a tensor's statistics under one recipe at one step, the GEMM check's
// output error, the scalars a job logs (loss), and the filters that read them back. One node's
// daemon or a whole job's share one schema: host, rank and run are part of every key. The stores'
// columns for these fields are declared once, in history/src/columns.cc; the wire's, in
// proto/history_rows.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/kernels/block_dynamic_range.h"
#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/vocabulary/cast_capture.h"
#include "fp8scope/vocabulary/caster.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/scale_layout.h"

namespace fp8scope::history {

inline constexpr std::size_t kRecordedOutlierChannels = 64;

struct HistoryRecord {
  std::uint64_t id = 0;  // its place in the store, increasing as records are added (set when read)
  double time = 0;  // seconds since the Unix epoch
  std::string job, run, host;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  std::string layer;
  GemmRole gemm = GemmRole::kUnknown;
  Operand operand = Operand::kX;
  DType dtype = DType::kF32;                 // as sampled
  std::int64_t numel = 0;
  Caster caster = Caster::job();             // a recipe's what-if, or the job's own codes
  CastFormat format = CastFormat::kE4M3;
  double scale = 0, scale_max = 0, scale_current = 0;
  std::vector<double> statistics;            // in statistics() order; NaN = not computed
  std::vector<std::uint64_t> histogram;      // log2|x*s| bins (kHistogramBins)
  std::string codes_digest;                  // hex code_digest() of the FP8 codes: the job's own
                                             // (observed) or a weight's under tensor_current; "" = none
  // The job's own codes: how its scales were laid out (kNone for the what-ifs), the GEMM's alpha
  // when read (0 = not), and its block scales' log2 histogram (kScaleHistogramBins).
  ScaleLayout scale_layout = ScaleLayout::kNone;
  double gemm_alpha = 0;
  std::vector<std::uint64_t> scale_histogram;
  // Mixture-of-experts GEMMs: the expert (-1: none), the tokens routed to it (-1: not known), and
  // the values past its tokens that were not zero or not finite (padding, which must be zero).
  std::int64_t expert = -1, expert_tokens = -1;
  std::uint64_t padding_nonzero = 0, padding_nonfinite = 0;
  // The tensor's persistent outlier channels (ChannelSummary::persistent), ascending, at most
  // kRecordedOutlierChannels: which columns of X or rows of W, kept here and never as labels.
  std::vector<std::uint64_t> outlier_channels;
  // What the figures were computed from: the job's codes alone, a high-precision GEMM operand, the
  // input of the job's own cast as captured, or recomputed from a fused cast's inputs.
  DataSource source = DataSource::kGemmOperand;
  // The job's own cast (source cast or recompute): fp8scope's name for the recipe it was made with,
  // the one its code check models.
  std::optional<RecipeKind> cast_recipe;
  // The figures in the tensor's unit (amax, mean, mse, ...) are relative to a per-tensor factor
  // the sample did not carry (NVFP4 codes from a GEMM alone): SampleAnalysis::relative_values.
  bool relative_values = false;
  // TE's max_blockwise_dynamic_range of the high-precision tensor, for the policy's block shapes.
  std::vector<BlockRangeValue> block_ranges;

  bool operator==(const HistoryRecord&) const = default;
};

// The daemon's GEMM check of one layer at one step: the FP8 GEMM's output against the
// high-precision one, per accumulation mode.
struct GemmOutputRecord {
  double time = 0;
  std::string job, run, host;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  std::string layer, accumulate;  // "fp32" | "fp22"
  std::int64_t numel = 0;         // output elements compared
  double scale_x = 0, scale_w = 0;
  double mse = 0, cosine = 0, max_rel_error = 0;

  bool operator==(const GemmOutputRecord&) const = default;
};

struct ScalarRecord {
  double time = 0;
  std::string job, run, host;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  std::string name;
  double value = 0;

  bool operator==(const ScalarRecord&) const = default;
};

struct HistoryFilter {
  std::string job, run, layer_regex;          // "" = any
  std::optional<Caster> caster;
  std::optional<GemmRole> gemm;
  std::optional<Operand> operand;
  std::optional<std::int64_t> expert;         // one expert's records (mixture-of-experts layers)
  std::uint64_t min_step = 0, max_step = 0;   // max 0 = no bound
  std::uint32_t limit = 100000;               // 0 = no limit
  std::uint64_t after_id = 0;                 // only records after this one: the next page
};

// An accepted sample whose records are stored (the daemon's journal releases it then): the
// writer's boot and the sample's sequence number in it.
struct SampleTicket {
  std::uint64_t boot = 0, seq = 0;
  std::uint32_t slot = 0;  // the journal's own handle, given back to it, not stored
};

}  // namespace fp8scope::history
