// The words of a job's own cast, captured where Transformer Engine makes it (DESIGN.md "The
// casts"): what the sample's high-precision part holds, the activation a fused cast applied, and
// the source every figure of a record comes from.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// The parts a cast's high-precision part can hold, in the order they are laid out: the input (x,
// or the gradient of a dactivation; input dtype), the activation's input of a dactivation, gamma
// and beta (param dtype, one per column), the norm's mu and rsigma (fp32, one per row), and the
// 16x16 Hadamard matrix (param dtype).
enum class CastPart : std::uint8_t { kInput, kActivationInput, kGamma, kBeta, kMu, kRsigma, kMatrix };
inline constexpr int kCastPartCount = 7;
constexpr std::uint32_t part_bit(CastPart p) { return 1u << static_cast<int>(p); }

// id, name, wire number, parts: what the high-precision part of a cast sample holds, and so how the
// daemon gets the tensor the cast quantized. Only `input` holds that tensor itself; the fused casts
// never write theirs, so the daemon recomputes it in fp32 from the kernel's inputs, as the kernel does.
#define FP8SCOPE_CAST_SOURCES(ROW)                                                                       \
  ROW(Input, "input", 1, P(kInput))          /* the cast's own input (nvte_quantize_v2, cast+transpose) */ \
  ROW(Layernorm, "layernorm", 2,                                                                         \
      P(kInput) | P(kGamma) | P(kBeta) | P(kMu) | P(kRsigma))  /* nvte_layernorm_fwd */                   \
  ROW(Rmsnorm, "rmsnorm", 3, P(kInput) | P(kGamma) | P(kRsigma))  /* nvte_rmsnorm_fwd */                  \
  ROW(Activation, "activation", 4, P(kInput))  /* the activation's input (nvte_gelu, nvte_swiglu, ...) */ \
  ROW(Dactivation, "dactivation", 5,                                                                     \
      P(kInput) | P(kActivationInput))  /* the gradient and the activation's input (quantize_dbias_d*) */ \
  ROW(Hadamard, "hadamard", 6, P(kInput) | P(kMatrix))  /* x and the matrix: the column-wise copy is RHT(x^T) */

enum class CastSource : std::uint8_t { FP8SCOPE_CAST_SOURCES(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct CastSourceTerm {
  CastSource value;
  const char* name;
  std::uint32_t wire;
  std::uint32_t parts;  // part_bit() of each part it holds
};
inline constexpr CastSourceTerm kCastSources[] = {
#define P(part) part_bit(CastPart::part)
#define FP8SCOPE_ROW(id, name, wire, parts) {CastSource::k##id, name, wire, parts},
    FP8SCOPE_CAST_SOURCES(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
#undef P
};
static_assert(vocabulary::well_formed(kCastSources));
constexpr const char* cast_source_name(CastSource s) { return vocabulary::name_of(kCastSources, s); }
constexpr const CastSourceTerm* cast_source_info(CastSource s) { return vocabulary::row_of(kCastSources, s); }
// Whether the daemon recomputes the cast's tensor (all but `input`; `hadamard` for its column-wise copy).
constexpr bool cast_source_recomputed(CastSource s, bool columnwise) {
  return s != CastSource::kInput && (s != CastSource::kHadamard || columnwise);
}

// The fp32 values a cast used, copied stream-ordered after it ran: they lead its part of the
// payload. TE's current scaling passes its scale in a buffer freed when the call returns.
struct CastScalars {
  float scale = 0;            // the per-tensor scale the cast multiplied by (per-tensor recipes)
  float amax = 0;             // NVFP4: the per-tensor amax of the row-wise codes' scales
  float columnwise_amax = 0;  // ... of the column-wise codes' (after the Hadamard transform)
  float noop = 0;             // the call's no-op flag: 1 when the cast wrote nothing (a cached weight)
};

// Where each part of a cast's high-precision part lies, from its start (after CastScalars and
// each part on a 16-byte boundary), and its total bytes; 0 for a source or dtype without a row.
struct CastLayout {
  std::uint64_t offset[kCastPartCount] = {};
  std::uint64_t bytes[kCastPartCount] = {};
  std::uint64_t total = 0;
  constexpr bool has(CastPart p) const { return bytes[static_cast<int>(p)] != 0; }
};

// rows x cols: the input as a matrix (a gated activation's holds both halves).
constexpr CastLayout cast_layout(CastSource source, std::uint64_t rows, std::uint64_t cols, DType input, DType param) {
  CastLayout l;
  const CastSourceTerm* info = cast_source_info(source);
  if (info == nullptr || dtype_bytes(input) == 0 || dtype_bytes(param) == 0 || rows == 0 || cols == 0) return l;
  const auto in = static_cast<std::uint64_t>(dtype_bytes(input)), pb = static_cast<std::uint64_t>(dtype_bytes(param));
  const std::uint64_t sizes[kCastPartCount] = {rows * cols * in, rows * cols * pb, cols * pb, cols * pb,
                                               rows * 4, rows * 4, 16 * 16 * pb};
  std::uint64_t at = (sizeof(CastScalars) + 15) / 16 * 16;
  for (int p = 0; p < kCastPartCount; ++p) {
    if ((info->parts & (1u << p)) == 0) continue;
    l.offset[p] = at;
    l.bytes[p] = sizes[p];
    at = (at + sizes[p] + 15) / 16 * 16;
  }
  l.total = at;
  return l;
}

// id, name, wire number, gated (the input holds [gate, linear] halves and the output is
// act(gate) * linear: TE's activation.h, "Act(input[N, :H]) x input[N, H:]"). TE's formulas are
// in transformer_engine/common/util/math.h (kernels' cast_inputs.h has them).
#define FP8SCOPE_ACTIVATIONS(ROW)                         \
  ROW(Gelu, "gelu", 1, false)                             \
  ROW(Silu, "silu", 2, false)                             \
  ROW(Relu, "relu", 3, false)                             \
  ROW(Qgelu, "qgelu", 4, false)                           \
  ROW(Srelu, "srelu", 5, false)                           \
  ROW(Glu, "glu", 6, true)                                \
  ROW(Geglu, "geglu", 7, true)                            \
  ROW(Swiglu, "swiglu", 8, true)                          \
  ROW(Reglu, "reglu", 9, true)                            \
  ROW(Qgeglu, "qgeglu", 10, true)                         \
  ROW(Sreglu, "sreglu", 11, true)                         \
  ROW(ClampedSwiglu, "clamped_swiglu", 12, true)

enum class Activation : std::uint8_t { FP8SCOPE_ACTIVATIONS(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct ActivationTerm {
  Activation value;
  const char* name;
  std::uint32_t wire;
  bool gated;
};
inline constexpr ActivationTerm kActivations[] = {
#define FP8SCOPE_ROW(id, name, wire, gated) {Activation::k##id, name, wire, gated},
    FP8SCOPE_ACTIVATIONS(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kActivations));
constexpr const char* activation_name(Activation a) { return vocabulary::name_of(kActivations, a); }
constexpr bool activation_gated(Activation a) {
  const ActivationTerm* t = vocabulary::row_of(kActivations, a);
  return t != nullptr && t->gated;
}

// id, name, wire number: what a record's figures were computed from. A what-if needs a
// high-precision tensor; the job's own statistics have one only when its cast was captured.
#define FP8SCOPE_DATA_SOURCES(ROW)                                                                      \
  ROW(Codes, "codes", 1)              /* the job's codes at a GEMM: no high-precision tensor */          \
  ROW(GemmOperand, "gemm", 2)         /* a high-precision GEMM operand (BF16, FP16, FP32) */            \
  ROW(CastInput, "cast", 3)           /* the high-precision input of the job's own cast */               \
  ROW(Recomputed, "recompute", 4)     /* recomputed in fp32 from a fused cast's inputs */

enum class DataSource : std::uint8_t { FP8SCOPE_DATA_SOURCES(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct DataSourceTerm {
  DataSource value;
  const char* name;
  std::uint32_t wire;
};
inline constexpr DataSourceTerm kDataSources[] = {
#define FP8SCOPE_ROW(id, name, wire) {DataSource::k##id, name, wire},
    FP8SCOPE_DATA_SOURCES(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kDataSources));
constexpr const char* data_source_name(DataSource s) { return vocabulary::name_of(kDataSources, s); }
constexpr std::optional<DataSource> data_source_from_name(std::string_view name) {
  return vocabulary::value_named(kDataSources, name);
}

}  // namespace fp8scope
