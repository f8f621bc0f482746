// The element type of a sampled or loaded tensor (wire DType). kernels/include/fp8scope/kernels/
// dtype.h converts elements of each type to fp32.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// id, name, wire number, bits per element, low-precision codes (values need their scales).
#define FP8SCOPE_DTYPES(ROW)                                                                       \
  ROW(F32, "f32", 1, 32, false)                                                                    \
  ROW(BF16, "bf16", 2, 16, false)                                                                  \
  ROW(F16, "f16", 3, 16, false)                                                                    \
  ROW(F64, "f64", 4, 64, false)                                                                    \
  ROW(E4M3, "e4m3", 5, 8, true)  /* FP8 codes; the value is decode(code) times its scale_inv */    \
  ROW(E5M2, "e5m2", 6, 8, true)                                                                    \
  ROW(E2M1, "e2m1", 7, 4, true)  /* FP4 codes, two a byte, the first element in the low nibble */

enum class DType : std::uint8_t { FP8SCOPE_DTYPES(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct DTypeTerm {
  DType value;
  const char* name;
  std::uint32_t wire;
  int bits;    // per element: 4 for FP4, whose codes come two a byte
  bool codes;  // low-precision codes, whose values need their scales
};

inline constexpr DTypeTerm kDTypes[] = {
#define FP8SCOPE_ROW(id, name, wire, bits, codes) {DType::k##id, name, wire, bits, codes},
    FP8SCOPE_DTYPES(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kDTypes));

constexpr const DTypeTerm* dtype_info(DType d) { return vocabulary::row_of(kDTypes, d); }
constexpr const char* dtype_name(DType d) { return vocabulary::name_of(kDTypes, d); }
constexpr std::optional<DType> dtype_from_name(std::string_view name) { return vocabulary::value_named(kDTypes, name); }
// A loop rather than dtype_info()'s pointer: GCC's -fsanitize=undefined makes comparing a table
// row's address with null non-constant, and static_asserts call these.
constexpr int dtype_bits(DType d) {
  for (const DTypeTerm& t : kDTypes) {
    if (t.value == d) return t.bits;
  }
  return 0;
}
// Bytes per element of the byte-addressed types; 0 for FP4 (see tensor_bytes) and unknown types.
constexpr int dtype_bytes(DType d) { return dtype_bits(d) % 8 == 0 ? dtype_bits(d) / 8 : 0; }
constexpr bool dtype_is_codes(DType d) { return dtype_info(d) && dtype_info(d)->codes; }

// Bytes of a rows x cols tensor stored densely (FP4: cols must be even, each row whole bytes);
// 0 when the shape cannot be stored so.
constexpr std::uint64_t tensor_bytes(DType d, std::uint64_t rows, std::uint64_t cols) {
  const std::uint64_t row_bits = cols * static_cast<std::uint64_t>(dtype_bits(d));
  return row_bits % 8 == 0 ? rows * (row_bits / 8) : 0;
}

}  // namespace fp8scope
