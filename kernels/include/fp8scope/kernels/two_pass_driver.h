// The two passes every statistics engine makes, written once for the CPU and the CUDA engine:
// pass 1 reads the tensor for its moments, the amax of every tabled block and of every channel; the scales follow
// from the shared rules (scale_rules.h: per-tensor from the tensor's TE amax, per block from the
// block's); pass 2 casts the tensor for every spec in one read; the per-spec scale ranges are
// finished here. A backend supplies the passes over its own memory (CPU row segments, CUDA
// kernels), so a new recipe or scale rule is one change, not one per engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fp8scope/kernels/host_device.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope {

FP8SCOPE_HD constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A spec's place in one analysis. Block specs have a grid of blocks (row-major, blocks_per_row
// across); a tabled spec's block amaxes are found in pass 1 and its scales computed between the
// passes into a table of three arrays at table_offset: amax, scale, scale_inv (block_count each).
// Untabled block specs (one-row blocks of a backend that prefers it) find their block amax and
// scales inside pass 2, where the row is already at hand.
struct SpecPlan {
  QuantSpec spec;
  std::int64_t blocks_per_row = 0, block_count = 0;
  bool tabled = false;
  std::size_t table_offset = 0;  // in floats
  // Known once pass 1 has run:
  BlockRule rule;
  ScalePair tensor_scale{1.0f, 1.0f};  // per-tensor specs

  bool per_block() const { return spec.per_block(); }
  // Block (row, col)'s place in this spec's arrays.
  std::size_t block_at(std::int64_t row, std::int64_t col) const {
    return static_cast<std::size_t>((row / spec.block_rows) * blocks_per_row + col / spec.block_cols);
  }
  std::size_t amax_at() const { return table_offset; }
  std::size_t scale_at() const { return table_offset + static_cast<std::size_t>(block_count); }
  std::size_t scale_inv_at() const { return table_offset + 2 * static_cast<std::size_t>(block_count); }
};

struct AnalysisPlan {
  std::vector<SpecPlan> specs;
  std::size_t table_floats = 0;  // every tabled spec's three arrays
  std::int64_t tallest_block = 1;  // rows of the tallest block (1, 16 or 128)
  ChannelAxis channels = ChannelAxis::kNone;
  std::int64_t channel_count = 0;  // columns or rows, as `channels` says; 0 for none
  bool row_amax = false;           // a row-scaled spec needs each row's TE amax from pass 1
};

// Which block specs a backend wants tabled besides the 2-D ones (which always are: their amax
// spans rows read at different times).
enum class RowBlocks { kInPass2, kTabled };

AnalysisPlan plan_analysis(const TensorView& t, std::span<const QuantSpec> specs, RowBlocks row_blocks);

// The backend primitives. The driver calls them in order, once each, on one thread.
class TwoPassBackend {
 public:
  virtual ~TwoPassBackend() = default;
  // Where this backend finds one-row blocks' scales.
  virtual RowBlocks row_blocks() const = 0;
  // The moments, the amax of every block of every tabled spec into its table, the amax of each of
  // plan.channel_count channels into channel_amax (sized by the driver, zeroed), and with
  // plan.row_amax each row's TE amax, kept by the backend for its row-scaled specs.
  virtual Status first_pass(const TensorView& t, const AnalysisPlan& plan, TensorMoments* moments,
                            std::span<float> channel_amax) = 0;
  // Every tabled spec's scale and scale_inv from its block amaxes, by spec.rule (block_scale()): a
  // row-scaled spec's rule under its row's amax (nvfp4_rule), a 4over6 spec's candidate picked
  // from the block's elements (four_over_six_pick) here or in pass 2, before its cast.
  virtual Status block_scales(const AnalysisPlan& plan) = 0;
  // Every spec's counts and error sums, and the scale range of untabled block specs.
  virtual Status second_pass(const TensorView& t, const AnalysisPlan& plan, std::vector<QuantStats>* quant) = 0;
  // A tabled spec's block scales, readable on the host (after second_pass).
  virtual Result<std::span<const float>> table_scales(const AnalysisPlan& plan, std::size_t spec) = 0;
};

// What StatsEngine::analyze does for every engine: checks the request, plans it, runs the passes
// and derives the scales between them, and finishes the scale ranges.
Status run_two_passes(TwoPassBackend& backend, const TensorView& t, std::span<const QuantSpec> specs,
                      TensorAnalysis* out);

}  // namespace fp8scope
