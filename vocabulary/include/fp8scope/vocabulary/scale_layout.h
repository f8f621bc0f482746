// How the scales of a low-precision operand are laid out (wire ScaleMode): cuBLASLt's
// CUBLASLT_MATMUL_MATRIX_SCALE_* modes, named as the CLI and the history spell them (the mode in
// lower case). "K" is the GEMM's reduction dimension, the one block scales run along; "M/N" the
// operand's other one. kernels/include/fp8scope/kernels/scale_layout.h sizes and reads them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// How one scale is stored.
enum class ScaleEncoding : std::uint8_t { kNone, kF32, kUE8M0, kUE4M3 };

// id, name, wire number, encoding, block extent along M/N and along K (0: the whole of it), the
// multiples the stored grid of scales pads its block counts along M/N and K to (cuBLASLt's 128x4
// tiles; the 16-byte rows of the fp32 block modes), and the layout whose storage it shares.
// vec16_ue4m3_row_scaled is cuBLASLt's VEC16_UE4M3 under TE's row-scaled NVFP4 (TE PR #2931, TE
// d0067d0 pytorch/cpp_extensions/gemm.py:84-112, 353-371): the block scales of each M/N row are
// relative to that row's own amax, which TE multiplies into the GEMM's output afterwards; the GEMM
// sees unit amaxes, so its alpha holds no per-tensor factor. The hook names it (row_scaled_gemm.h).
#define FP8SCOPE_SCALE_LAYOUTS(ROW)                                                                                  \
  ROW(None, "none", 1, kNone, 0, 0, 1, 1, None)                      /* not a low-precision operand */                \
  ROW(TensorScalar, "scalar_32f", 2, kF32, 0, 0, 1, 1, TensorScalar) /* SCALAR_32F: one fp32 scale_inv */              \
  ROW(RowVector, "outer_vec_32f", 4, kF32, 1, 0, 1, 1, RowVector)    /* OUTER_VEC_32F: one fp32 per M/N row */         \
  ROW(Vec128F32, "vec128_32f", 5, kF32, 1, 128, 4, 1, Vec128F32)     /* VEC128_32F: one fp32 per 1x128, M/N contiguous */ \
  ROW(Block128x128F32, "blk128x128_32f", 6, kF32, 128, 128, 1, 4, Block128x128F32) /* BLK128x128_32F: K blocks contiguous */ \
  ROW(Vec32Ue8m0, "vec32_ue8m0", 7, kUE8M0, 1, 32, 128, 4, Vec32Ue8m0) /* MXFP8, MXFP4: one E8M0 per 1x32, 128x4 tiles */ \
  ROW(Vec16Ue4m3, "vec16_ue4m3", 8, kUE4M3, 1, 16, 128, 4, Vec16Ue4m3) /* NVFP4: one UE4M3 per 1x16, 128x4 tiles */    \
  ROW(Vec16Ue4m3RowScaled, "vec16_ue4m3_row_scaled", 9, kUE4M3, 1, 16, 128, 4, Vec16Ue4m3) /* row-scaled NVFP4 */

enum class ScaleLayout : std::uint8_t { FP8SCOPE_SCALE_LAYOUTS(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct ScaleLayoutTerm {
  ScaleLayout value;
  const char* name;
  std::uint32_t wire;
  ScaleEncoding encoding;
  int block_mn;
  int block_k;
  int mn_pad;
  int k_pad;
  ScaleLayout storage;  // the layout whose bytes these are: itself, or the one it is a reading of
  bool row_scaled() const { return storage != value; }
  // Whether codes decoded with these scales are only relative to a per-tensor factor: UE4M3 block
  // scales (NVFP4) multiply one, given or not (`factor_given`), and a row-scaled GEMM's are per row.
  bool relative_values(bool factor_given) const {
    return encoding == ScaleEncoding::kUE4M3 && (!factor_given || row_scaled());
  }
};

inline constexpr ScaleLayoutTerm kScaleLayouts[] = {
#define FP8SCOPE_ROW(id, name, wire, encoding, block_mn, block_k, mn_pad, k_pad, storage) \
  {ScaleLayout::k##id, name, wire, ScaleEncoding::encoding, block_mn, block_k, mn_pad, k_pad, ScaleLayout::k##storage},
    FP8SCOPE_SCALE_LAYOUTS(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kScaleLayouts) && kScaleLayouts[0].value == ScaleLayout::kNone);

// The layout whose storage l's bytes are (l itself, but for a reading of another one's bytes).
constexpr ScaleLayout storage_of(ScaleLayout l) {
  const ScaleLayoutTerm* r = vocabulary::row_of(kScaleLayouts, l);
  return r != nullptr ? r->storage : l;
}

constexpr const char* scale_layout_name(ScaleLayout l) { return vocabulary::name_of(kScaleLayouts, l); }
// Block scales: a scale tensor beside the codes (everything but none and one scalar).
constexpr bool is_block_layout(ScaleLayout l) { return l != ScaleLayout::kNone && l != ScaleLayout::kTensorScalar; }

// The layouts that carry scales (all but none), and lookups among them: nullptr for none and for
// numbers or names no row has.
constexpr std::span<const ScaleLayoutTerm> scale_layouts() { return std::span(kScaleLayouts).subspan(1); }
constexpr const ScaleLayoutTerm* scale_layout_info(ScaleLayout l) {
  const ScaleLayoutTerm* r = vocabulary::row_of(kScaleLayouts, l);
  return r != nullptr && r->encoding != ScaleEncoding::kNone ? r : nullptr;
}
constexpr const ScaleLayoutTerm* scale_layout_from_name(std::string_view name) {
  const ScaleLayoutTerm* r = vocabulary::row_named(kScaleLayouts, name);
  return r != nullptr && r->encoding != ScaleEncoding::kNone ? r : nullptr;
}

}  // namespace fp8scope
