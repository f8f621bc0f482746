#include "fp8scope/cpu_engine.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "fp8scope/scale_rules.h"
#include "segment_kernels.h"
#include "task_pool.h"

namespace fp8scope {
namespace {

using cpu::kSegmentCols;

constexpr std::int64_t kPanelRows = 128;           // the tallest block; a unit never splits one
constexpr std::int64_t kSerialBelowElements = 1 << 16;  // smaller tensors are not worth a hand-off

// The tensor is cut into units of (128-row panel) x (4096-column chunk); each task takes a
// contiguous run of units, so results depend on the task count only, never on timing.
struct Grid {
  std::int64_t rows, cols, panels, chunks;
  std::int64_t units() const { return panels * chunks; }
};

struct Unit {
  std::int64_t panel, row_begin, row_end, col_begin, col_end;
};

Unit unit_at(const Grid& g, std::int64_t u) {
  Unit unit;
  unit.panel = u / g.chunks;
  unit.row_begin = unit.panel * kPanelRows;
  unit.row_end = std::min(g.rows, unit.row_begin + kPanelRows);
  unit.col_begin = (u % g.chunks) * kSegmentCols;
  unit.col_end = std::min(g.cols, unit.col_begin + kSegmentCols);
  return unit;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool is_block(const QuantSpec& s) { return s.mode == ScaleMode::kBlockE8M0 || s.mode == ScaleMode::kBlockCurrent; }

// Scale and scale_inv for one block (or tensor) from its TE amax.
struct ScalePair {
  float scale, scale_inv;
};

ScalePair block_scale(const QuantSpec& spec, float amax) {
  const float fmax = format_max(spec.format);
  if (spec.mode == ScaleMode::kBlockE8M0) {
    const std::uint8_t e = mxfp8_block_exponent(amax, 1.0f / fmax);
    return {e8m0_quantize_scale(e), decode_e8m0(e)};
  }
  const float s = current_scale(amax, fmax, spec.power_of_2, spec.epsilon);
  return {s, 1.0f / s};
}

// Per-call state of one 128-row-block spec: the amax of every 2-D block, then its scales.
struct Block2d {
  std::int64_t blocks_per_row = 0;
  std::vector<float> amax;
  std::vector<ScalePair> scales;
};

class CpuEngine final : public StatsEngine {
 public:
  explicit CpuEngine(int threads) : pool_(threads - 1), kernels_(cpu::best_segment_kernels()) {}

  const char* name() const override { return "cpu"; }

  Status analyze(const TensorView& t, std::span<const QuantSpec> specs, TensorAnalysis* out) override {
    if (Status s = check_analysis_request(t, specs); !s.ok()) return s;
    const Grid grid{t.rows, t.cols, ceil_div(t.rows, kPanelRows), ceil_div(t.cols, kSegmentCols)};
    const int tasks = t.numel() < kSerialBelowElements
                          ? 1
                          : static_cast<int>(std::min<std::int64_t>(pool_.workers() + 1, grid.units()));
    auto units_of = [&](int task) {
      return std::pair<std::int64_t, std::int64_t>{grid.units() * task / tasks, grid.units() * (task + 1) / tasks};
    };

    std::vector<Block2d> blocks2d(specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) {
      if (is_block(specs[k]) && specs[k].block_rows > 1) {
        blocks2d[k].blocks_per_row = ceil_div(t.cols, specs[k].block_cols);
        blocks2d[k].amax.assign(static_cast<std::size_t>(grid.panels * blocks2d[k].blocks_per_row), 0.0f);
      }
    }

    // Pass 1: moments, and the amax of every 2-D block.
    std::vector<TensorMoments> moments(static_cast<std::size_t>(tasks));
    pool_.run(tasks, [&](int task) {
      std::vector<float> x(kSegmentCols), block(kSegmentCols);
      const auto [first, last] = units_of(task);
      for (std::int64_t u = first; u < last; ++u) {
        const Unit unit = unit_at(grid, u);
        const int n = static_cast<int>(unit.col_end - unit.col_begin);
        for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
          kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, n, x.data());
          kernels_.add_moments(x.data(), n, &moments[static_cast<std::size_t>(task)]);
          for (std::size_t k = 0; k < specs.size(); ++k) {
            Block2d& b2 = blocks2d[k];
            if (b2.amax.empty()) continue;
            kernels_.block_amax(x.data(), n, specs[k].block_cols, block.data());
            float* row = b2.amax.data() + unit.panel * b2.blocks_per_row + unit.col_begin / specs[k].block_cols;
            const int nb = static_cast<int>(ceil_div(n, specs[k].block_cols));
            for (int b = 0; b < nb; ++b) row[b] = std::max(row[b], block[static_cast<std::size_t>(b)]);
          }
        }
      }
    });
    out->moments = TensorMoments{};
    for (const auto& m : moments) merge(out->moments, m);
    out->te_amax = te_amax(out->moments.amax, out->moments.inf > 0);

    std::vector<ScalePair> tensor_scale(specs.size(), ScalePair{1.0f, 1.0f});
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const QuantSpec& spec = specs[k];
      if (spec.mode == ScaleMode::kTensorFixed) tensor_scale[k] = {spec.fixed_scale, 1.0f / spec.fixed_scale};
      if (spec.mode == ScaleMode::kTensorCurrent) tensor_scale[k] = block_scale(spec, out->te_amax);
      for (float a : blocks2d[k].amax) blocks2d[k].scales.push_back(block_scale(spec, a));
    }

    // Pass 2: every spec's cast of every segment.
    std::vector<std::vector<QuantStats>> quant(static_cast<std::size_t>(tasks), std::vector<QuantStats>(specs.size()));
    pool_.run(tasks, [&](int task) {
      std::vector<float> x(kSegmentCols), amax(kSegmentCols), s(kSegmentCols), si(kSegmentCols);
      std::vector<QuantStats>& acc = quant[static_cast<std::size_t>(task)];
      const auto [first, last] = units_of(task);
      for (std::int64_t u = first; u < last; ++u) {
        const Unit unit = unit_at(grid, u);
        const int n = static_cast<int>(unit.col_end - unit.col_begin);
        for (std::int64_t r = unit.row_begin; r < unit.row_end; ++r) {
          kernels_.to_float(t.data, t.dtype, t.scale_inv, r * t.cols + unit.col_begin, n, x.data());
          for (std::size_t k = 0; k < specs.size(); ++k) {
            const QuantSpec& spec = specs[k];
            if (!is_block(spec)) {
              kernels_.quantize(spec.format, x.data(), n, &tensor_scale[k].scale, &tensor_scale[k].scale_inv, false,
                                &acc[k]);
              continue;
            }
            const int bc = spec.block_cols;
            const int nb = static_cast<int>(ceil_div(n, bc));
            if (spec.block_rows == 1) kernels_.block_amax(x.data(), n, bc, amax.data());
            for (int b = 0; b < nb; ++b) {
              const ScalePair p =
                  spec.block_rows == 1
                      ? block_scale(spec, amax[static_cast<std::size_t>(b)])
                      : blocks2d[k].scales[static_cast<std::size_t>(unit.panel * blocks2d[k].blocks_per_row +
                                                                    unit.col_begin / bc + b)];
              const int end = std::min(n, (b + 1) * bc);
              std::fill(s.begin() + b * bc, s.begin() + end, p.scale);
              std::fill(si.begin() + b * bc, si.begin() + end, p.scale_inv);
              acc[k].scale_min = std::min(acc[k].scale_min, p.scale);
              acc[k].scale_max = std::max(acc[k].scale_max, p.scale);
            }
            kernels_.quantize(spec.format, x.data(), n, s.data(), si.data(), true, &acc[k]);
          }
        }
      }
    });
    out->quant.assign(specs.size(), QuantStats{});
    for (std::size_t k = 0; k < specs.size(); ++k) {
      for (const auto& q : quant) merge(out->quant[k], q[k]);
      if (!is_block(specs[k])) out->quant[k].scale_min = out->quant[k].scale_max = tensor_scale[k].scale;
    }
    return Status();
  }

 private:
  cpu::TaskPool pool_;
  const cpu::SegmentKernels& kernels_;
};

}  // namespace

std::unique_ptr<StatsEngine> make_cpu_engine(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuEngine>(threads);
}

}  // namespace fp8scope
