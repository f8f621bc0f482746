// The enums of the wire contract (proto/fp8scope/v1/fp8scope.proto) as plain C++, for the code that
// links no protobuf: the hook, its shared ring and the kernels. proto/wire.cc static_asserts every
// value against the generated enums, so the two spellings cannot drift; everything that crosses
// the wire converts through these names, never through literal numbers.
#pragma once

#include <cstdint>

namespace fp8scope {

// The element type of a sample (wire DType).
enum class DType : std::uint8_t {
  kF32 = 1,
  kBF16 = 2,
  kF16 = 3,
  kF64 = 4,
  kE4M3 = 5,  // FP8 codes; the value is decode(code) times its scale_inv
  kE5M2 = 6,
  kE2M1 = 7,  // FP4 codes, two a byte, the first element in the low nibble (cuda_fp4.h's order)
};

// The GEMM a sample came from (wire Gemm). Roles from the layout: TN fprop (A = W, B = X), NN dgrad
// (A = W, B = Dy), NT wgrad (A = X, B = Dy).
enum class GemmRole : std::uint8_t { kFprop = 1, kDgrad = 2, kWgrad = 3, kUnknown = 4 };

// Which operand of a GEMM a tensor is (wire Operand). Forward operands use a recipe's forward
// format, gradients the backward one (TE's HYBRID = E4M3 forward, E5M2 backward).
enum class Operand : std::uint8_t { kX = 1, kW = 2, kDy = 3 };

// The what-if recipes (wire Recipe); kernels/src/recipe.cc holds their rules.
enum class RecipeKind : std::uint8_t {
  kTensorCurrent = 1,  // TE Float8CurrentScaling: one scale per tensor from this tensor's amax
  kTensorDelayed = 2,  // TE DelayedScaling: one scale per tensor from an amax history
  kMxfp8 = 3,          // TE MXFP8BlockScaling: E8M0 scale per 1x32 row block
  kBlock1x128 = 4,     // TE Float8BlockScaling / DeepSeek-V3 activations: 1x128, power-of-2 scales
  kBlock128x128 = 5,   // TE Float8BlockScaling / DeepSeek-V3 weights: 128x128, power-of-2 scales
  kNvfp4 = 6,          // TE NVFP4BlockScaling: E2M1, UE4M3 scale per 1x16 block (16x16 for weights)
  kMxfp4 = 7,          // OCP MXFP4: E2M1, E8M0 scale per 1x32 block (TE's MX rounding)
};

// How the scales of a low-precision operand are laid out (wire ScaleMode): cuBLASLt's
// CUBLASLT_MATMUL_MATRIX_SCALE_* modes, named by what the daemon must do to read them. "K" is the
// GEMM's reduction dimension, the one block scales run along.
enum class ScaleLayout : std::uint8_t {
  kNone = 1,            // not a low-precision operand
  kTensorScalar = 2,    // SCALAR_32F: one fp32 scale_inv
  kRowVector = 4,       // OUTER_VEC_32F: one fp32 per row (M of A, N of B)
  kVec128F32 = 5,       // VEC128_32F: one fp32 per 1x128 block along K
  kBlock128x128F32 = 6, // BLK128x128_32F: one fp32 per 128x128 block
  kVec32Ue8m0 = 7,      // VEC32_UE8M0 (MXFP8, MXFP4): one E8M0 per 1x32 block along K, tiled 128x4
  kVec16Ue4m3 = 8,      // VEC16_UE4M3 (NVFP4): one UE4M3 per 1x16 block along K, tiled 128x4
};

// What a client drops before a sample reaches the daemon: the keys of ClientCounters.dropped, in
// the hook's order (shm_ring.h). A closed set: the daemon counts any other key as "other", so a
// client cannot mint metric series.
inline constexpr const char* kClientDropReasons[] = {
    "ring_full",          "staging_full",       "budget",
    "too_large",          "graph_capture",      "unsupported_dtype",
    "unsupported_layout", "pointer_array_batch", "unsupported_scale_mode",
    "no_context",         "cuda_error",         "daemon_unreachable",
    "daemon_refused",     "daemon_too_old"};

}  // namespace fp8scope
