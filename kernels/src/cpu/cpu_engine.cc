#include "fp8scope/kernels/cpu_engine.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "code_histogram.h"
#include "fp8scope/kernels/observed_analysis.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/kernels/two_pass_driver.h"
#include "segment_kernels.h"
#include "task_pool.h"

namespace fp8scope {
namespace {

using cpu::kSegmentCols;

constexpr std::int64_t kSerialBelowElements = 1 << 16;  // smaller tensors are not worth a hand-off
constexpr int kTasksPerThread = 8;  // finer than one task per thread, so a slow core does not stall the rest
// Counting 16-bit values pays once the tensor outgrows the 65,536 values it then evaluates.
constexpr std::int64_t kValueCountsFromElements = 1 << 18;
constexpr std::int64_t kMaxElementsPerCounter = std::int64_t{1} << 31;  // CodeHistogram's 32-bit counters

// The tensor is cut into units of (panel of rows) x (4096-column chunk); each task takes a
// contiguous run of units, so results depend on the task count only, never on timing. Panels are
// one row (a single memory stream per task) unless a 2-D block recipe needs 16-, 32- or 128-row
// panels (the tallest block; see valid_block_rows, so no block straddles two panels).
struct Grid {
  std::int64_t rows, cols, panel_rows, panels, chunks;
  std::int64_t units() const { return panels * chunks; }
};

struct Unit {
  std::int64_t panel, row_begin, row_end, col_begin, col_end;
  int cols() const { return static_cast<int>(col_end - col_begin); }
};

Unit unit_at(const Grid& g, std::int64_t u) {
  Unit unit;
  unit.panel = u / g.chunks;
  unit.row_begin = unit.panel * g.panel_rows;
  unit.row_end = std::min(g.rows, unit.row_begin + g.panel_rows);
  unit.col_begin = (u % g.chunks) * kSegmentCols;
  unit.col_end = std::min(g.cols, unit.col_begin + kSegmentCols);
  return unit;
}

// The CPU's passes (two_pass_driver.h) over row segments converted to fp32 in L1-sized buffers.
// One-row blocks find their amax and scales inside pass 2, from the segment at hand; the tables
// hold the 2-D blocks. 8- and 16-bit tensors may be counted by value in pass 1 instead, and the
// per-tensor specs evaluated from the counts (one read for them all).
class CpuPasses final : public TwoPassBackend {
 public:
  CpuPasses(cpu::TaskPool& pool, const cpu::SegmentKernels& kernels, cpu::HistogramPool& histograms, bool by_value)
      : pool_(pool), kernels_(kernels), histograms_(histograms), by_value_(by_value) {}
  ~CpuPasses() override {
    for (cpu::CodeHistogram& h : values_) h.clear();
    histograms_.give_back(std::move(values_));
  }
  CpuPasses(const CpuPasses&) = delete;
  CpuPasses& operator=(const CpuPasses&) = delete;

  RowBlocks row_blocks() const override { return RowBlocks::kInPass2; }

  Status first_pass(const TensorView& t, const AnalysisPlan& plan, TensorMoments* moments,
                    std::span<float> channel_amax) override {
    grid_ = Grid{t.rows, t.cols, plan.tallest_block, ceil_div(t.rows, plan.tallest_block), ceil_div(t.cols, kSegmentCols)};
    tables_.assign(plan.table_floats, 0.0f);
    channel_axis_ = plan.channels;
    channel_amax_ = channel_amax;
    row_amax_.assign(plan.row_amax ? static_cast<std::size_t>(t.rows) : 0, 0.0f);
    if (by_value_) {
      count_values(t, plan);
      *moments = values_.front().moments(t.scale_inv);
    } else {
      *moments = elementwise_moments(t, plan);
    }
    return Status();
  }

  Status block_scales(const AnalysisPlan& plan) override {
    for (const SpecPlan& p : plan.specs) {
      if (!p.tabled) continue;
      kernels_.block_scales(p.rule, tables_.data() + p.amax_at(), static_cast<int>(p.block_count),
                            tables_.data() + p.scale_at(), tables_.data() + p.scale_inv_at());
    }
    return Status();
  }

  Status second_pass(const TensorView& t, const AnalysisPlan& plan, std::vector<QuantStats>* quant) override {
    std::vector<std::size_t> cast;
    for (std::size_t k = 0; k < plan.specs.size(); ++k) {
      const SpecPlan& p = plan.specs[k];
      if (by_value_ && !p.per_block() && !p.spec.stochastic) {
        (*quant)[k] = values_.front().quantize(p.spec.format, p.tensor_scale.scale, p.tensor_scale.scale_inv, t.scale_inv);
      } else {
        cast.push_back(k);
      }
    }
    if (!cast.empty()) cast_elementwise(t, plan, cast, quant);
    return Status();
  }

  Result<std::span<const float>> table_scales(const AnalysisPlan& plan, std::size_t k) override {
    const SpecPlan& p = plan.specs[k];
    return std::span<const float>(tables_.data() + p.scale_at(), static_cast<std::size_t>(p.block_count));
  }

 private:
  int task_count(const TensorView& t) const {
    if (t.numel() < kSerialBelowElements) return 1;
    return static_cast<int>(std::min<std::int64_t>((pool_.workers() + 1) * kTasksPerThread, grid_.units()));
  }

  std::int64_t first_unit(int task, int tasks) const { return grid_.units() * task / tasks; }

  template <class F>
  void for_units(int tasks, F f) {
    pool_.run(tasks, [&](int task) {
      for (std::int64_t u = first_unit(task, tasks); u < first_unit(task + 1, tasks); ++u) f(task, unit_at(grid_, u));
    });
  }

  // Pass 1's channel amaxes (and the row amaxes of row-scaled specs, channels along rows): a task
  // folds its rows into an array of its own over the channels it touches (every column, or its
  // contiguous run of rows) and merges it into the whole once done. Max is exact and order-free,
  // so the result does not depend on scheduling.
  // Columns of 16-bit floats counted by value keep their amax as magnitude bits (bits), which
  // order as the magnitudes do, until handed over: no conversion of the elements.
  struct TaskChannels {
    ChannelAxis axis = ChannelAxis::kNone;
    std::int64_t first = 0;
    std::vector<float> amax;
    std::vector<std::uint16_t> bits;
    bool active() const { return !amax.empty() || !bits.empty(); }
  };

  TaskChannels task_channels(int task, int tasks, ChannelAxis axis, bool as_bits = false) const {
    TaskChannels c;
    c.axis = axis;
    const std::int64_t first = first_unit(task, tasks), last = first_unit(task + 1, tasks);
    if (axis == ChannelAxis::kNone || first == last) return c;
    std::int64_t count = grid_.cols;
    if (axis == ChannelAxis::kRows) {
      c.first = unit_at(grid_, first).row_begin;
      count = unit_at(grid_, last - 1).row_end - c.first;
    }
    if (as_bits && axis == ChannelAxis::kColumns) {
      c.bits.assign(static_cast<std::size_t>(count), 0);
    } else {
      c.amax.assign(static_cast<std::size_t>(count), 0.0f);
    }
    return c;
  }

  void fold_channels(TaskChannels& c, const Unit& unit, std::int64_t r, const float* x, float* scratch) const {
    if (c.amax.empty()) return;
    if (c.axis == ChannelAxis::kColumns) {
      kernels_.fold_amax(x, unit.cols(), c.amax.data() + unit.col_begin);
      return;
    }
    kernels_.block_amax(x, unit.cols(), unit.cols(), scratch);
    float& row = c.amax[static_cast<std::size_t>(r - c.first)];
    row = std::max(row, scratch[0]);
  }

  // A 16-bit float's Inf bits, for rows whose amax is read from the codes (max_magnitude_bits16).
  static std::optional<std::uint16_t> inf_bits16(DType dtype) {
    if (dtype == DType::kBF16) return 0x7F80;
    if (dtype == DType::kF16) return 0x7C00;
    return std::nullopt;
  }

  // A row's amax, or each column's, from the codes of a 16-bit tensor.
  void fold_bits(TaskChannels& c, const TensorView& t, const Unit& unit, std::int64_t r, std::uint16_t inf_bits) const {
    const auto* codes = static_cast<const std::uint16_t*>(t.data) + r * t.cols + unit.col_begin;
    if (!c.bits.empty()) {
      kernels_.fold_magnitude_bits16(codes, unit.cols(), inf_bits, c.bits.data() + unit.col_begin);
      return;
    }
    const std::uint16_t bits = kernels_.max_magnitude_bits16(codes, unit.cols(), inf_bits);
    float& row = c.amax[static_cast<std::size_t>(r - c.first)];
    row = std::max(row, small_element_value(t.dtype, bits, 1.0f));
  }

  void hand_over(const TaskChannels& c, std::span<float> whole, DType dtype) {
    if (!c.active()) return;
    std::lock_guard<std::mutex> lock(channel_mu_);
    float* all = whole.data() + c.first;
    for (std::size_t i = 0; i < c.amax.size(); ++i) all[i] = std::max(all[i], c.amax[i]);
    for (std::size_t i = 0; i < c.bits.size(); ++i) all[i] = std::max(all[i], small_element_value(dtype, c.bits[i], 1.0f));
  }

  // Runs f(task, unit, channels, rows) over every unit, each task with its own arrays of channel
  // and row amaxes.
  template <class F>
  void for_units_with_channels(int tasks, DType dtype, bool column_bits, F f) {
    pool_.run(tasks, [&](int task) {
      TaskChannels channels = task_channels(task, tasks, channel_axis_, column_bits);
      TaskChannels rows = task_channels(task, tasks, row_amax_.empty() ? ChannelAxis::kNone : ChannelAxis::kRows);
      for (std::int64_t u = first_unit(task, tasks); u < first_unit(task + 1, tasks); ++u) {
        f(task, unit_at(grid_, u), channels, rows);
      }
      hand_over(channels, channel_amax_, dtype);
      hand_over(rows, row_amax_, dtype);
    });
  }

  // The amax of each tabled block the segment (row r of unit) touches, folded into the tables.
  void add_block_amax(const Unit& unit, std::int64_t r, const float* x, const AnalysisPlan& plan, float* scratch) {
    for (const SpecPlan& p : plan.specs) {
      if (!p.tabled) continue;
      const int bc = p.spec.block_cols;
      kernels_.block_amax(x, unit.cols(), bc, scratch);
      float* row = tables_.data() + p.amax_at() + p.block_at(r, unit.col_begin);
      for (int b = 0; b < ceil_div(unit.cols(), bc); ++b) row[b] = std::max(row[b], scratch[b]);
    }
  }

  TensorMoments elementwise_moments(const TensorView& t, const AnalysisPlan& plan) {
    const int tasks = task_count(t);
    std::vector<TensorMoments> partial(static_cast<std::size_t>(tasks));
    std::vector<std::vector<float>> x(static_cast<std::size_t>(tasks)), scratch(static_cast<std::size_t>(tasks));
    for_units_with_channels(tasks, t.dtype, false, [&](int task, const Unit& unit, TaskChannels& channels, TaskChannels& rows) {
      auto& xs = x[static_cast<std::size_t>(task)];
      auto& sc = scratch[static_cast<std::size_t>(task)];
      xs.resize(kSegmentCols);
      sc.resize(kSegmentCols);
      for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
        kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, unit.cols(), xs.data());
        TensorMoments& m = partial[static_cast<std::size_t>(task)];
        if (t.amax_only) {
          kernels_.block_amax(xs.data(), unit.cols(), unit.cols(), sc.data());
          m.amax = std::max(m.amax, sc[0]);
        } else {
          kernels_.add_moments(xs.data(), unit.cols(), &m);
        }
        add_block_amax(unit, r, xs.data(), plan, sc.data());
        fold_channels(channels, unit, r, xs.data(), sc.data());
        fold_channels(rows, unit, r, xs.data(), sc.data());
      }
    });
    TensorMoments m;
    for (const auto& p : partial) merge(m, p);
    return m;
  }

  // Counts the tensor's values into values_ (one histogram, settled).
  void count_values(const TensorView& t, const AnalysisPlan& plan) {
    // One histogram per thread (they are large), more when 32-bit counters could fill up.
    const int tasks = static_cast<int>(std::min<std::int64_t>(
        std::max<std::int64_t>(pool_.workers() + 1, ceil_div(t.numel(), kMaxElementsPerCounter)), grid_.units()));
    std::vector<cpu::CodeHistogram> partial = histograms_.take(t.dtype, static_cast<std::size_t>(tasks));
    // 16-bit floats find their rows' and columns' amax from the codes; other dtypes need the floats.
    const std::optional<std::uint16_t> bits16 = inf_bits16(t.dtype);
    const bool as_floats = !tables_.empty() || ((channel_axis_ != ChannelAxis::kNone || !row_amax_.empty()) && !bits16);
    std::vector<std::vector<float>> x(static_cast<std::size_t>(tasks)), scratch(static_cast<std::size_t>(tasks));
    for_units_with_channels(tasks, t.dtype, bits16.has_value(), [&](int task, const Unit& unit, TaskChannels& channels,
                                                                     TaskChannels& rows) {
      auto& xs = x[static_cast<std::size_t>(task)];
      auto& sc = scratch[static_cast<std::size_t>(task)];
      if (as_floats) {
        xs.resize(kSegmentCols);
        sc.resize(kSegmentCols);
      }
      for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
        partial[static_cast<std::size_t>(task)].add(t.data, r * t.cols + unit.col_begin, unit.cols());
        if (bits16) {
          if (channels.active()) fold_bits(channels, t, unit, r, *bits16);
          if (rows.active()) fold_bits(rows, t, unit, r, *bits16);
        }
        if (!as_floats) continue;
        kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, unit.cols(), xs.data());
        add_block_amax(unit, r, xs.data(), plan, sc.data());
        if (!bits16) {
          fold_channels(channels, unit, r, xs.data(), sc.data());
          fold_channels(rows, unit, r, xs.data(), sc.data());
        }
      }
    });
    // Into the first, in task order; the others go back empty.
    for (std::size_t k = 1; k < partial.size(); ++k) partial.front().absorb(partial[k]);
    partial.front().settle();
    values_.push_back(std::move(partial.front()));
    partial.erase(partial.begin());
    histograms_.give_back(std::move(partial));
  }

  // A pass 2 task's buffers, one segment each.
  struct Buffers {
    std::vector<float> x, amax, scale, scale_inv, error4, error6;
    cpu::FourOverSixBlocks candidates;  // 4over6 in 16x16 blocks
    void reserve() {
      if (!x.empty()) return;
      for (auto* v : {&x, &amax, &scale, &scale_inv, &error4, &error6}) v->resize(kSegmentCols);
    }
  };

  // 4over6 in 16x16 blocks (a tabled spec): a block picks its candidate from all 16 of its rows
  // before any of them is cast, so this spec takes the unit in stripes of 16 rows by kStripeCols
  // columns, each converted once into L1 (row i at i * width) for both: each row's errors, TE's
  // tree over the rows (tree_sum16), the pick into the table, then the stripe's cast in one call.
  // Blocks never straddle units, so no other task writes these table entries.
  static constexpr int kStripeCols = kSegmentCols / 16;
  void cast_four_over_six_2d(const TensorView& t, const SpecPlan& p, const Unit& unit, Buffers& b, QuantStats& acc) {
    constexpr int kRows = 16;
    const int bc = p.spec.block_cols;
    float* table = tables_.data();
    for (std::int64_t r0 = unit.row_begin; r0 < unit.row_end; r0 += kRows) {
      const int rows = static_cast<int>(std::min<std::int64_t>(kRows, unit.row_end - r0));
      for (int c0 = 0; c0 < unit.cols(); c0 += kStripeCols) {
        const int width = std::min(kStripeCols, unit.cols() - c0), nb = static_cast<int>(ceil_div(width, bc));
        const std::size_t first = p.block_at(r0, unit.col_begin + c0);
        kernels_.four_over_six_blocks(p.rule, table + p.amax_at() + first, nb, &b.candidates);
        float rows4[kStripeCols / 16][kRows] = {}, rows6[kStripeCols / 16][kRows] = {};  // past the last row: 0
        for (int i = 0; i < rows; ++i) {
          float* x = b.x.data() + i * width;
          kernels_.to_float(t.data, t.dtype, t.scale_inv, (r0 + i) * t.cols + unit.col_begin + c0, width, x);
          kernels_.four_over_six_errors(x, width, bc, b.candidates, p.rule.tensor_amax, b.error4.data(), b.error6.data());
          for (int blk = 0; blk < nb; ++blk) {
            rows4[blk][i] = b.error4[blk];
            rows6[blk][i] = b.error6[blk];
          }
        }
        for (int blk = 0; blk < nb; ++blk) {
          b.error4[blk] = tree_sum16(rows4[blk]);
          b.error6[blk] = tree_sum16(rows6[blk]);
        }
        float* scale = table + p.scale_at() + first;
        float* scale_inv = table + p.scale_inv_at() + first;
        kernels_.four_over_six_picks(b.candidates, b.error4.data(), b.error6.data(), nb, scale, scale_inv);
        for (int i = 0; i < rows; ++i) {  // each row's copy of the blocks' scales, for one cast of the stripe
          std::copy(scale, scale + nb, b.scale.begin() + i * nb);
          std::copy(scale_inv, scale_inv + nb, b.scale_inv.begin() + i * nb);
        }
        if (width % bc == 0) {
          kernels_.quantize(p.spec.format, b.x.data(), rows * width, b.scale.data(), b.scale_inv.data(), bc, &acc);
        } else {  // a last block narrower than the others: row by row
          for (int i = 0; i < rows; ++i) {
            kernels_.quantize(p.spec.format, b.x.data() + i * width, width, b.scale.data() + i * nb,
                              b.scale_inv.data() + i * nb, bc, &acc);
          }
        }
      }
    }
  }

  // Pass 2 for the specs listed in `cast`, element by element.
  void cast_elementwise(const TensorView& t, const AnalysisPlan& plan, const std::vector<std::size_t>& cast,
                        std::vector<QuantStats>* quant) {
    const int tasks = task_count(t);
    std::vector<std::vector<QuantStats>> partial(static_cast<std::size_t>(tasks),
                                                 std::vector<QuantStats>(plan.specs.size()));
    std::vector<Buffers> buffers(static_cast<std::size_t>(tasks));
    for_units(tasks, [&](int task, const Unit& unit) {
      Buffers& b = buffers[static_cast<std::size_t>(task)];
      b.reserve();
      std::vector<QuantStats>& acc = partial[static_cast<std::size_t>(task)];
      const int n = unit.cols();
      std::vector<std::size_t> by_row;
      for (std::size_t k : cast) {
        if (plan.specs[k].tabled && plan.specs[k].rule.kind == BlockRule::kNvfp4FourOverSix) {
          cast_four_over_six_2d(t, plan.specs[k], unit, b, acc[k]);
        } else {
          by_row.push_back(k);
        }
      }
      if (by_row.empty()) return;
      for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
        const float* x = b.x.data();
        kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, n, b.x.data());
        for (std::size_t k : by_row) {
          const SpecPlan& p = plan.specs[k];
          if (!p.per_block()) {
            kernels_.quantize(p.spec.format, x, n, &p.tensor_scale.scale, &p.tensor_scale.scale_inv, 0,
                              &acc[k]);
            continue;
          }
          const int bc = p.spec.block_cols;
          const float* scale = b.scale.data();
          const float* scale_inv = b.scale_inv.data();
          if (p.tabled) {
            const std::size_t first = p.block_at(r, unit.col_begin);
            scale = tables_.data() + p.scale_at() + first;
            scale_inv = tables_.data() + p.scale_inv_at() + first;
          } else {
            const int nb = static_cast<int>(ceil_div(n, bc));
            kernels_.block_amax(x, n, bc, b.amax.data());
            const BlockRule rule = p.spec.row_scaled ? nvfp4_rule(row_amax_[static_cast<std::size_t>(r)]) : p.rule;
            if (rule.kind == BlockRule::kNvfp4FourOverSix) {
              kernels_.four_over_six_scales(rule, x, n, bc, b.amax.data(), b.scale.data(), b.scale_inv.data());
            } else {
              kernels_.block_scales(rule, b.amax.data(), nb, b.scale.data(), b.scale_inv.data());
            }
            for (int blk = 0; blk < nb; ++blk) {
              acc[k].scale_min = std::min(acc[k].scale_min, scale[blk]);
              acc[k].scale_max = std::max(acc[k].scale_max, scale[blk]);
            }
          }
          const auto cast_segment = p.spec.stochastic ? kernels_.quantize_expected : kernels_.quantize;
          cast_segment(p.spec.format, x, n, scale, scale_inv, bc, &acc[k]);
        }
      }
    });
    for (std::size_t k : cast) {
      for (const auto& p : partial) merge((*quant)[k], p[k]);
    }
  }

  cpu::TaskPool& pool_;
  const cpu::SegmentKernels& kernels_;
  cpu::HistogramPool& histograms_;
  bool by_value_;
  Grid grid_{};
  std::vector<float> tables_;
  std::vector<cpu::CodeHistogram> values_;  // the tensor's, counted (by_value_), until given back
  ChannelAxis channel_axis_ = ChannelAxis::kNone;
  std::span<float> channel_amax_;
  std::vector<float> row_amax_;  // each row's TE amax, for row-scaled specs
  std::mutex channel_mu_;
};

class CpuEngine final : public StatsEngine {
 public:
  CpuEngine(int threads, const cpu::SegmentKernels& kernels, CpuEngineOptions::Strategy strategy)
      : pool_(threads - 1), kernels_(kernels), strategy_(strategy) {}

  const char* name() const override { return "cpu"; }

  Status analyze(const TensorView& t, std::span<const QuantSpec> specs, TensorAnalysis* out) override {
    CpuPasses passes(pool_, kernels_, histograms_, use_value_counts(t, specs));
    return run_two_passes(passes, t, specs, out);
  }

  // Ranges of stored rows on every thread. Ranges of whole row units share no scale block, so
  // they fold their block amaxes into one table; a tensor of fewer units than tasks (one
  // per-tensor scale, say) gives each task blocks of its own, merged after. Partial results merge
  // in range order: the result depends on the thread count only.
  Result<ObservedAnalysis> analyze_observed(const ObservedTensor& t) override {
    Result<BlockScaleGrid> scales = observed_scales(t);
    if (!scales.ok()) return scales.status();
    const BlockScaleGrid& g = scales.value();
    const std::int64_t rows = t.shape.rows, numel = rows * t.shape.cols;
    const std::int64_t unit = observed_blocks(t, g).rows_per_block(), units = ceil_div(rows, unit);
    const std::size_t count = g.scale_inv.size();
    std::int64_t tasks = numel < kSerialBelowElements ? 1 : std::min<std::int64_t>((pool_.workers() + 1) * kTasksPerThread, rows);
    const bool own_blocks = units < tasks;
    if (own_blocks) tasks = std::min<std::int64_t>(tasks, pool_.workers() + 1);
    const std::size_t tables = own_blocks ? static_cast<std::size_t>(tasks) : 1;
    std::vector<float> block_amax(count * tables, 0.0f), block_amin(count * tables, kFloatMax);
    std::vector<ObservedRows> partial(static_cast<std::size_t>(tasks));
    pool_.run(static_cast<int>(tasks), [&](int task) {
      // Own blocks: plain row ranges. Shared table: ranges of whole units.
      const std::int64_t step = own_blocks ? 1 : unit, pieces = own_blocks ? rows : units;
      const std::int64_t first = std::min(rows, pieces * task / tasks * step);
      const std::int64_t last = std::min(rows, pieces * (task + 1) / tasks * step);
      const std::size_t table = own_blocks ? static_cast<std::size_t>(task) * count : 0;
      partial[static_cast<std::size_t>(task)] =
          observe_rows(t, g, first, last, block_amax.data() + table, block_amin.data() + table);
    });
    TensorMoments moments;
    std::uint64_t saturated = 0;
    for (const ObservedRows& p : partial) {
      merge(moments, p.moments);
      saturated += p.saturated;
    }
    for (std::size_t k = 1; k < tables; ++k) {
      for (std::size_t b = 0; b < count; ++b) {
        block_amax[b] = std::max(block_amax[b], block_amax[k * count + b]);
        block_amin[b] = std::min(block_amin[b], block_amin[k * count + b]);
      }
    }
    return finish_observed(g, moments, saturated, std::span<const float>(block_amax.data(), count),
                           std::span<const float>(block_amin.data(), count));
  }

 private:
  bool use_value_counts(const TensorView& t, std::span<const QuantSpec> specs) const {
    if (dtype_info(t.dtype) == nullptr) return false;  // refused by the driver's checks
    switch (strategy_) {
      case CpuEngineOptions::Strategy::kElementwise: return false;
      case CpuEngineOptions::Strategy::kValueCounts: return cpu::countable(t.dtype);
      case CpuEngineOptions::Strategy::kAuto: break;
    }
    // Counting only pays when a per-tensor spec gets its result from the counts.
    if (std::all_of(specs.begin(), specs.end(), [](const QuantSpec& s) { return s.per_block(); })) return false;
    return dtype_bytes(t.dtype) == 1 || (dtype_bytes(t.dtype) == 2 && t.numel() >= kValueCountsFromElements);
  }

  cpu::TaskPool pool_;
  const cpu::SegmentKernels& kernels_;
  CpuEngineOptions::Strategy strategy_;
  cpu::HistogramPool histograms_;
};

}  // namespace

std::vector<std::string> cpu_isas() {
  std::vector<std::string> names;
  for (const cpu::SegmentKernels* k : cpu::runnable_segment_kernels()) names.emplace_back(k->isa);
  return names;
}

Result<std::unique_ptr<StatsEngine>> make_cpu_engine(const CpuEngineOptions& options) {
  const auto runnable = cpu::runnable_segment_kernels();
  const cpu::SegmentKernels* kernels = runnable.front();
  if (!options.isa.empty()) {
    auto it = std::find_if(runnable.begin(), runnable.end(), [&](auto* k) { return options.isa == k->isa; });
    if (it == runnable.end()) {
      std::string known;
      for (auto* k : runnable) known += std::string(known.empty() ? "" : ", ") + k->isa;
      return Status::error("cpu engine: expected an ISA this CPU runs (" + known + "), got " + options.isa);
    }
    kernels = *it;
  }
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::unique_ptr<StatsEngine>(std::make_unique<CpuEngine>(threads, *kernels, options.strategy));
}

std::unique_ptr<StatsEngine> make_cpu_engine(int threads) {
  CpuEngineOptions options;
  options.threads = threads;
  return std::move(make_cpu_engine(options)).value();
}

}  // namespace fp8scope
