// TE's row-scaled NVFP4 (TE PR #2931; TE d0067d0) runs an ordinary NVFP4 cuBLASLt GEMM: it replaces
// both operands' per-tensor amaxes with 1 (pytorch/cpp_extensions/gemm.py:84-112), so TE's alpha
// kernel (common/recipe/nvfp4.cu:75-77) writes 1 * 1 * 1 * fp32(1 / (6 * 6 * 448 * 448)), bits
// 0x34149B93, and TE multiplies the row amaxes into the output afterwards (gemm.py:353-371).
// Nothing else in the call marks it. The activation's block scales are then relative to each of its
// rows, not to one tensor amax: its samples are labelled so the daemon reads them as such
// (ScaleLayout::kVec16Ue4m3RowScaled). A regular NVFP4 GEMM has that alpha only when its operands'
// amaxes multiply to exactly 1.
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/scale_layout.h"

namespace fp8scope::hook {

inline constexpr std::uint32_t kRowScaledNvfp4AlphaBits = 0x34149B93u;

inline bool row_scaled_nvfp4_alpha(float alpha) {
  std::uint32_t bits;
  std::memcpy(&bits, &alpha, sizeof bits);
  return bits == kRowScaledNvfp4AlphaBits;
}

// The layout an operand's sample carries once the GEMM's alpha is known: the activation of a
// row-scaled NVFP4 GEMM (fprop's B, wgrad's A) gets the row-scaled reading of VEC16_UE4M3; every
// other operand keeps its own (the weight's and gradient's scales are the usual per-tensor ones).
inline ScaleLayout labelled_layout(ScaleLayout layout, DType dtype, Operand operand, float gemm_alpha) {
  const bool row_scaled = layout == ScaleLayout::kVec16Ue4m3 && dtype == DType::kE2M1 && operand == Operand::kX &&
                          row_scaled_nvfp4_alpha(gemm_alpha);
  return row_scaled ? ScaleLayout::kVec16Ue4m3RowScaled : layout;
}

}  // namespace fp8scope::hook
