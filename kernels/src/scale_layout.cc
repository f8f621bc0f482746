#include "fp8scope/kernels/scale_layout.h"

#include <cstring>
#include <string>

#include "fp8scope/kernels/float_cast.h"

namespace fp8scope {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

int encoding_bytes(ScaleEncoding e) { return e == ScaleEncoding::kF32 ? 4 : 1; }

// The geometry of a layout on a shape: block extents with "whole" resolved, block counts.
BlockScaleGrid empty_grid(const ScaleLayoutTerm& info, const ScaledShape& shape) {
  BlockScaleGrid g;
  g.info = &info;
  g.block_mn = info.block_mn == 0 ? shape.mn() : info.block_mn;
  g.block_k = info.block_k == 0 ? shape.k() : info.block_k;
  g.mn_blocks = ceil_div(shape.mn(), g.block_mn);
  g.k_blocks = ceil_div(shape.k(), g.block_k);
  return g;
}

// Where block (p, q) sits in the stored tensor, in scale elements (see scale_layout.h).
std::uint64_t stored_offset(ScaleLayout layout, const BlockScaleGrid& g, std::int64_t p, std::int64_t q) {
  switch (storage_of(layout)) {
    case ScaleLayout::kVec16Ue4m3RowScaled:  // stored as vec16_ue4m3
    case ScaleLayout::kVec16Ue4m3:
    case ScaleLayout::kVec32Ue8m0: {
      const std::int64_t tiles_per_row = round_up(g.k_blocks, 4) / 4;
      const std::int64_t tile = (p / 128) * tiles_per_row + q / 4;
      return static_cast<std::uint64_t>(tile * 512 + (p % 32) * 16 + ((p % 128) / 32) * 4 + q % 4);
    }
    case ScaleLayout::kVec128F32: return static_cast<std::uint64_t>(q * round_up(g.mn_blocks, 4) + p);
    case ScaleLayout::kBlock128x128F32: return static_cast<std::uint64_t>(p * round_up(g.k_blocks, 4) + q);
    case ScaleLayout::kRowVector: return static_cast<std::uint64_t>(p);
    case ScaleLayout::kTensorScalar:
    case ScaleLayout::kNone: break;
  }
  return 0;
}

std::uint32_t read_code(ScaleEncoding e, std::span<const std::uint8_t> bytes, std::uint64_t at) {
  if (e != ScaleEncoding::kF32) return bytes[at];
  std::uint32_t bits;
  std::memcpy(&bits, bytes.data() + at * 4, 4);
  return bits;
}

float decode_scale(ScaleEncoding e, std::uint32_t code) {
  switch (e) {
    case ScaleEncoding::kUE8M0: return decode_e8m0(static_cast<std::uint8_t>(code));
    case ScaleEncoding::kUE4M3: return decode_ue4m3(static_cast<std::uint8_t>(code));
    case ScaleEncoding::kF32:
    case ScaleEncoding::kNone: break;  // read_code gave the fp32 bits
  }
  return bits_float(code);
}

template <class Offset>
Result<BlockScaleGrid> read_grid(ScaleLayout layout, const ScaledShape& shape, std::span<const std::uint8_t> bytes,
                                 float tensor_scale_inv, std::uint64_t expected_bytes, Offset offset) {
  const ScaleLayoutTerm* info = scale_layout_info(layout);
  if (info == nullptr) return Status::error("expected a scale layout, got code " + std::to_string(static_cast<int>(layout)));
  if (shape.rows <= 0 || shape.cols <= 0) return Status::error("expected a nonempty operand");
  BlockScaleGrid g = empty_grid(*info, shape);
  if (bytes.size() != expected_bytes) {
    return Status::error(std::string(info->name) + " scales of a " + std::to_string(shape.mn()) + " x " +
                         std::to_string(shape.k()) + " (M/N x K) operand: expected " + std::to_string(expected_bytes) +
                         " bytes, got " + std::to_string(bytes.size()));
  }
  const std::size_t blocks = static_cast<std::size_t>(g.mn_blocks * g.k_blocks);
  g.scale_inv.resize(blocks);
  g.codes.resize(blocks);
  for (std::int64_t p = 0; p < g.mn_blocks; ++p) {
    for (std::int64_t q = 0; q < g.k_blocks; ++q) {
      const std::size_t b = static_cast<std::size_t>(p * g.k_blocks + q);
      g.codes[b] = read_code(info->encoding, bytes, offset(g, p, q));
      g.scale_inv[b] = mul_rn(decode_scale(info->encoding, g.codes[b]), tensor_scale_inv);
    }
  }
  return g;
}

}  // namespace

ScaleGeometry scale_geometry(ScaleLayout layout) {
  const ScaleLayoutTerm* info = scale_layout_info(layout);
  if (info == nullptr) return ScaleGeometry{0, 0, 0, 0, 0};
  return ScaleGeometry{static_cast<std::uint32_t>(info->block_mn), static_cast<std::uint32_t>(info->block_k),
                       static_cast<std::uint32_t>(info->mn_pad), static_cast<std::uint32_t>(info->k_pad),
                       static_cast<std::uint32_t>(encoding_bytes(info->encoding))};
}

std::uint64_t scale_tensor_bytes(ScaleLayout layout, const ScaledShape& shape) {
  if (shape.rows <= 0 || shape.cols <= 0) return 0;
  return scale_tensor_bytes_of(scale_geometry(layout), static_cast<std::uint64_t>(shape.mn()),
                               static_cast<std::uint64_t>(shape.k()));
}

bool scales_of_rows_are_a_prefix(ScaleLayout layout, bool k_is_outer) {
  // Tiles of 128 rows in row order, and a row's place in its tile independent of the row count
  // (stored_offset); the fp32 block modes store M/N contiguous, or blocks 128 rows high.
  const ScaleLayout stored = storage_of(layout);
  const bool row_ordered = stored == ScaleLayout::kVec16Ue4m3 || stored == ScaleLayout::kVec32Ue8m0 ||
                           stored == ScaleLayout::kRowVector;
  return row_ordered && !k_is_outer;
}

Result<BlockScaleGrid> untile_scales(ScaleLayout layout, const ScaledShape& shape, std::span<const std::uint8_t> bytes,
                                     float tensor_scale_inv) {
  return read_grid(layout, shape, bytes, tensor_scale_inv, scale_tensor_bytes(layout, shape),
                   [layout](const BlockScaleGrid& g, std::int64_t p, std::int64_t q) {
                     return stored_offset(layout, g, p, q);
                   });
}

Result<BlockScaleGrid> compact_scales(ScaleLayout layout, const ScaledShape& shape, std::span<const std::uint8_t> bytes,
                                      float tensor_scale_inv) {
  const ScaleLayoutTerm* info = scale_layout_info(layout);
  std::uint64_t expected = 0;
  if (info != nullptr && shape.rows > 0 && shape.cols > 0) {
    const BlockScaleGrid g = empty_grid(*info, shape);
    expected = static_cast<std::uint64_t>(g.mn_blocks * g.k_blocks) * static_cast<std::uint64_t>(encoding_bytes(info->encoding));
  }
  return read_grid(layout, shape, bytes, tensor_scale_inv, expected,
                   [](const BlockScaleGrid& g, std::int64_t p, std::int64_t q) {
                     return static_cast<std::uint64_t>(p * g.k_blocks + q);
                   });
}

}  // namespace fp8scope
