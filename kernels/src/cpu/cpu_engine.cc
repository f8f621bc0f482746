#include "fp8scope/cpu_engine.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <vector>

#include "code_histogram.h"
#include "fp8scope/scale_rules.h"
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
// one row (a single memory stream per task) unless a 2-D block recipe needs 16- or 128-row panels
// (the tallest block; 128 is a multiple of 16, so no block straddles two panels).
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

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool is_block(const QuantSpec& s) { return s.per_block(); }

// The amax of every 2-D block of one spec of 16- or 128-row blocks, then its scales; block (i, j)
// at i * per_row + j.
struct Blocks2d {
  std::int64_t per_row = 0;
  std::vector<float> amax, scale, scale_inv;

  std::size_t index(const QuantSpec& spec, std::int64_t row, std::int64_t col) const {
    return static_cast<std::size_t>((row / spec.block_rows) * per_row + col / spec.block_cols);
  }
};

class CpuEngine final : public StatsEngine {
 public:
  CpuEngine(int threads, const cpu::SegmentKernels& kernels, CpuEngineOptions::Strategy strategy)
      : pool_(threads - 1), kernels_(kernels), strategy_(strategy) {}

  const char* name() const override { return "cpu"; }

  Status analyze(const TensorView& t, std::span<const QuantSpec> specs, TensorAnalysis* out) override {
    if (Status s = check_analysis_request(t, specs); !s.ok()) return s;
    std::int64_t panel_rows = 1;
    for (const QuantSpec& spec : specs) {
      if (is_block(spec)) panel_rows = std::max<std::int64_t>(panel_rows, spec.block_rows);
    }
    const Grid grid{t.rows, t.cols, panel_rows, ceil_div(t.rows, panel_rows), ceil_div(t.cols, kSegmentCols)};
    const bool by_value = use_value_counts(t, specs);

    std::vector<Blocks2d> blocks2d(specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) {
      if (is_block(specs[k]) && specs[k].block_rows > 1) {
        blocks2d[k].per_row = ceil_div(t.cols, specs[k].block_cols);
        blocks2d[k].amax.assign(static_cast<std::size_t>(ceil_div(t.rows, specs[k].block_rows) * blocks2d[k].per_row),
                                0.0f);
      }
    }

    // Pass 1: the moments (or the value counts they come from) and every 2-D block's amax.
    std::optional<cpu::CodeHistogram> values;
    if (by_value) {
      values = count_values(t, grid, specs, blocks2d);
      out->moments = values->moments(t.scale_inv);
    } else {
      out->moments = elementwise_moments(t, grid, specs, blocks2d);
    }
    out->te_amax = te_amax(out->moments.amax, out->moments.inf > 0);

    std::vector<ScalePair> tensor_scale(specs.size(), ScalePair{1.0f, 1.0f});
    std::vector<BlockRule> rules(specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const QuantSpec& spec = specs[k];
      rules[k] = block_rule_for(spec, out->te_amax);
      if (spec.rule == ScaleRule::kTensorFixed) tensor_scale[k] = {spec.fixed_scale, 1.0f / spec.fixed_scale};
      if (spec.rule == ScaleRule::kTensorCurrent) tensor_scale[k] = current_block_scale(rules[k], out->te_amax);
      Blocks2d& b2 = blocks2d[k];
      b2.scale.resize(b2.amax.size());
      b2.scale_inv.resize(b2.amax.size());
      kernels_.block_scales(rules[k], b2.amax.data(), static_cast<int>(b2.amax.size()), b2.scale.data(),
                            b2.scale_inv.data());
    }

    // Per-tensor specs from the value counts; pass 2 casts the tensor for the rest.
    out->quant.assign(specs.size(), QuantStats{});
    std::vector<std::size_t> cast;
    for (std::size_t k = 0; k < specs.size(); ++k) {
      if (by_value && !is_block(specs[k])) {
        out->quant[k] = values->quantize(specs[k].format, tensor_scale[k].scale, tensor_scale[k].scale_inv, t.scale_inv);
      } else {
        cast.push_back(k);
      }
    }
    if (!cast.empty()) cast_elementwise(t, grid, specs, rules, cast, tensor_scale, blocks2d, out);
    return Status();
  }

 private:
  bool use_value_counts(const TensorView& t, std::span<const QuantSpec> specs) const {
    switch (strategy_) {
      case CpuEngineOptions::Strategy::kElementwise: return false;
      case CpuEngineOptions::Strategy::kValueCounts: return cpu::countable(t.dtype);
      case CpuEngineOptions::Strategy::kAuto: break;
    }
    // Counting only pays when a per-tensor spec gets its result from the counts.
    if (std::all_of(specs.begin(), specs.end(), is_block)) return false;
    return dtype_bytes(t.dtype) == 1 || (dtype_bytes(t.dtype) == 2 && t.numel() >= kValueCountsFromElements);
  }

  int task_count(const TensorView& t, const Grid& grid) const {
    if (t.numel() < kSerialBelowElements) return 1;
    return static_cast<int>(std::min<std::int64_t>((pool_.workers() + 1) * kTasksPerThread, grid.units()));
  }

  template <class F>
  void for_units(const Grid& grid, int tasks, F f) {
    pool_.run(tasks, [&](int task) {
      const std::int64_t first = grid.units() * task / tasks, last = grid.units() * (task + 1) / tasks;
      for (std::int64_t u = first; u < last; ++u) f(task, unit_at(grid, u));
    });
  }

  // The amax of each 2-D block the segment (row r of unit) touches, folded into the tables.
  void add_block_amax(const Unit& unit, std::int64_t r, const float* x, std::span<const QuantSpec> specs,
                      std::vector<Blocks2d>& blocks2d, float* scratch) {
    for (std::size_t k = 0; k < specs.size(); ++k) {
      Blocks2d& b2 = blocks2d[k];
      if (b2.amax.empty()) continue;
      const int bc = specs[k].block_cols;
      kernels_.block_amax(x, unit.cols(), bc, scratch);
      float* row = b2.amax.data() + b2.index(specs[k], r, unit.col_begin);
      for (int b = 0; b < ceil_div(unit.cols(), bc); ++b) row[b] = std::max(row[b], scratch[b]);
    }
  }

  static bool wants_block_amax(const std::vector<Blocks2d>& blocks2d) {
    return std::any_of(blocks2d.begin(), blocks2d.end(), [](const Blocks2d& b) { return !b.amax.empty(); });
  }

  TensorMoments elementwise_moments(const TensorView& t, const Grid& grid, std::span<const QuantSpec> specs,
                                    std::vector<Blocks2d>& blocks2d) {
    const int tasks = task_count(t, grid);
    std::vector<TensorMoments> partial(static_cast<std::size_t>(tasks));
    std::vector<std::vector<float>> x(static_cast<std::size_t>(tasks)), scratch(static_cast<std::size_t>(tasks));
    for_units(grid, tasks, [&](int task, const Unit& unit) {
      auto& xs = x[static_cast<std::size_t>(task)];
      auto& sc = scratch[static_cast<std::size_t>(task)];
      xs.resize(kSegmentCols);
      sc.resize(kSegmentCols);
      for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
        kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, unit.cols(), xs.data());
        kernels_.add_moments(xs.data(), unit.cols(), &partial[static_cast<std::size_t>(task)]);
        add_block_amax(unit, r, xs.data(), specs, blocks2d, sc.data());
      }
    });
    TensorMoments m;
    for (const auto& p : partial) merge(m, p);
    return m;
  }

  cpu::CodeHistogram count_values(const TensorView& t, const Grid& grid, std::span<const QuantSpec> specs,
                                  std::vector<Blocks2d>& blocks2d) {
    // One histogram per thread (they are large), more when 32-bit counters could fill up.
    const int tasks = static_cast<int>(std::min<std::int64_t>(
        std::max<std::int64_t>(pool_.workers() + 1, ceil_div(t.numel(), kMaxElementsPerCounter)), grid.units()));
    std::vector<cpu::CodeHistogram> partial(static_cast<std::size_t>(tasks), cpu::CodeHistogram(t.dtype));
    const bool block_amax = wants_block_amax(blocks2d);
    for_units(grid, tasks, [&](int task, const Unit& unit) {
      std::vector<float> x, scratch;
      if (block_amax) {
        x.resize(kSegmentCols);
        scratch.resize(kSegmentCols);
      }
      for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
        partial[static_cast<std::size_t>(task)].add(t.data, r * t.cols + unit.col_begin, unit.cols());
        if (!block_amax) continue;
        kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, unit.cols(), x.data());
        add_block_amax(unit, r, x.data(), specs, blocks2d, scratch.data());
      }
    });
    cpu::CodeHistogram all(t.dtype);
    for (const auto& p : partial) all.merge(p);
    return all;
  }

  // Pass 2: the specs listed in `cast`, element by element.
  void cast_elementwise(const TensorView& t, const Grid& grid, std::span<const QuantSpec> specs,
                        const std::vector<BlockRule>& rules, const std::vector<std::size_t>& cast,
                        const std::vector<ScalePair>& tensor_scale,
                        const std::vector<Blocks2d>& blocks2d, TensorAnalysis* out) {
    const int tasks = task_count(t, grid);
    std::vector<std::vector<QuantStats>> partial(static_cast<std::size_t>(tasks),
                                                 std::vector<QuantStats>(specs.size()));
    struct Buffers {
      std::vector<float> x, amax, scale, scale_inv;
    };
    std::vector<Buffers> buffers(static_cast<std::size_t>(tasks));
    for_units(grid, tasks, [&](int task, const Unit& unit) {
      Buffers& b = buffers[static_cast<std::size_t>(task)];
      if (b.x.empty()) {
        for (auto* v : {&b.x, &b.amax, &b.scale, &b.scale_inv}) v->resize(kSegmentCols);
      }
      std::vector<QuantStats>& acc = partial[static_cast<std::size_t>(task)];
      const int n = unit.cols();
      for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
        kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, n, b.x.data());
        for (std::size_t k : cast) {
          const QuantSpec& spec = specs[k];
          if (!is_block(spec)) {
            kernels_.quantize(spec.format, b.x.data(), n, &tensor_scale[k].scale, &tensor_scale[k].scale_inv, 0,
                              &acc[k]);
            continue;
          }
          const int bc = spec.block_cols;
          const int nb = static_cast<int>(ceil_div(n, bc));
          const float* scale = b.scale.data();
          const float* scale_inv = b.scale_inv.data();
          if (spec.block_rows == 1) {
            kernels_.block_amax(b.x.data(), n, bc, b.amax.data());
            kernels_.block_scales(rules[k], b.amax.data(), nb, b.scale.data(), b.scale_inv.data());
          } else {
            const std::size_t first = blocks2d[k].index(spec, r, unit.col_begin);
            scale = blocks2d[k].scale.data() + first;
            scale_inv = blocks2d[k].scale_inv.data() + first;
          }
          for (int blk = 0; blk < nb; ++blk) {
            acc[k].scale_min = std::min(acc[k].scale_min, scale[blk]);
            acc[k].scale_max = std::max(acc[k].scale_max, scale[blk]);
          }
          kernels_.quantize(spec.format, b.x.data(), n, scale, scale_inv, bc, &acc[k]);
        }
      }
    });
    for (std::size_t k : cast) {
      for (const auto& p : partial) merge(out->quant[k], p[k]);
      if (!is_block(specs[k])) out->quant[k].scale_min = out->quant[k].scale_max = tensor_scale[k].scale;
    }
  }

  cpu::TaskPool pool_;
  const cpu::SegmentKernels& kernels_;
  CpuEngineOptions::Strategy strategy_;
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
