#include "fp8scope/kernels/block_dynamic_range.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fp8scope/kernels/dtype.h"

namespace fp8scope {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A block's extremes of |x|: the largest, and the smallest that is not zero.
struct Extremes {
  float amax = 0.0f;
  float amin = std::numeric_limits<float>::infinity();
  void add(float a) {
    amax = a > amax ? a : amax;
    if (a != 0.0f && a < amin) amin = a;
  }
  double range() const {
    return amax != 0.0f ? std::log2(static_cast<double>(amax)) - std::log2(static_cast<double>(amin)) : 0.0;
  }
};

}  // namespace

double max_block_dynamic_range(const TensorView& t, BlockRange spec, bool columnwise) {
  const auto rows = static_cast<std::uint64_t>(t.rows), cols = static_cast<std::uint64_t>(t.cols);
  const std::uint64_t numel = rows * cols, b = spec.block_size;
  if (numel == 0 || b == 0 || (spec.dims != 1 && spec.dims != 2)) return kNaN;
  // The view: rows x cols, or cols x rows transposed. Its element f (row-major) is read at
  // memory index vr * row_step + vc * col_step.
  const std::uint64_t view_rows = columnwise ? cols : rows, view_cols = columnwise ? rows : cols;
  const std::uint64_t row_step = columnwise ? 1 : cols, col_step = columnwise ? cols : 1;
  // dims 1: block f / b. dims 2, reshape(-1, b, dim_y, b): tile (f / unit) * dim_y + (f % (dim_y b)) / b.
  const std::uint64_t dim_y = view_cols / b, unit = b * b * dim_y;
  if (spec.dims == 1 ? numel % b != 0 : (dim_y == 0 || numel % unit != 0)) return kNaN;
  std::vector<Extremes> blocks(spec.dims == 1 ? 1 : numel / (b * b));
  double widest = 0.0;
  std::uint64_t f = 0;
  for (std::uint64_t vr = 0; vr < view_rows; ++vr) {
    for (std::uint64_t vc = 0; vc < view_cols; ++vc, ++f) {
      const float a = std::fabs(load_element(t.data, static_cast<std::size_t>(vr * row_step + vc * col_step), t.dtype, t.scale_inv));
      if (std::isnan(a)) return kNaN;
      if (spec.dims == 2) {
        blocks[(f / unit) * dim_y + (f % (dim_y * b)) / b].add(a);
        continue;
      }
      blocks[0].add(a);  // dims 1: the blocks come one after another
      if ((f + 1) % b == 0) {
        widest = std::max(widest, blocks[0].range());
        blocks[0] = Extremes{};
      }
    }
  }
  if (spec.dims == 2) {
    for (const Extremes& e : blocks) widest = std::max(widest, e.range());
  }
  return widest;
}

std::vector<BlockRangeValue> block_dynamic_ranges(const TensorView& t, const std::vector<BlockRange>& specs) {
  std::vector<BlockRangeValue> out;
  for (const BlockRange& spec : specs) {
    out.push_back({spec, max_block_dynamic_range(t, spec, false), max_block_dynamic_range(t, spec, true)});
  }
  return out;
}

}  // namespace fp8scope
