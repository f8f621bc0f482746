// SIMD types and helpers for the CPU engine's segment loops (GCC/Clang vector extensions, so one
// source serves every ISA level). Accumulators live in registers, floating-point sums keep
// separate lanes that are combined in a fixed order at the end, so a given build gives the same
// sums every run. The vector width is the compiled copy's (FP8SCOPE_VECTOR_BYTES).
// Included by segment_kernels.cc only.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "fp8scope/kernels/lanes.h"

namespace fp8scope::cpu::FP8SCOPE_ISA {

inline constexpr int kVectorBytes = FP8SCOPE_VECTOR_BYTES;
inline constexpr int kWidth = kVectorBytes / 4;  // floats per vector

using F32V = float __attribute__((vector_size(kVectorBytes)));
using U32V = std::uint32_t __attribute__((vector_size(kVectorBytes)));
using I32V = std::int32_t __attribute__((vector_size(kVectorBytes)));
using F32H = float __attribute__((vector_size(kVectorBytes / 2)));  // half a vector of floats...
using F64V = double __attribute__((vector_size(kVectorBytes)));     // ...widens to a vector of doubles
using U8V = std::uint8_t __attribute__((vector_size(kVectorBytes)));
using U8W = std::uint8_t __attribute__((vector_size(kWidth)));      // one byte per float lane

template <class V>
inline V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class V>
inline void store(void* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

template <int kOffset, int... I>
inline F32H half_of(F32V v, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(v, v, (kOffset + I)...);
}

// The two halves of a float vector, widened to doubles. GCC 12 lowers the generic form for 512-bit
// vectors to two 256-bit conversions and a shuffle, so AVX-512 gets the one-instruction form.
#if defined(__AVX512F__) && defined(__AVX512DQ__) && FP8SCOPE_VECTOR_BYTES == 64
inline F64V widen_low(F32V v) {
  return reinterpret_cast<F64V>(_mm512_cvtps_pd(_mm512_castps512_ps256(reinterpret_cast<__m512>(v))));
}
inline F64V widen_high(F32V v) {
  return reinterpret_cast<F64V>(_mm512_cvtps_pd(_mm512_extractf32x8_ps(reinterpret_cast<__m512>(v), 1)));
}
#else
inline F64V widen_low(F32V v) {
  return __builtin_convertvector(half_of<0>(v, std::make_integer_sequence<int, kWidth / 2>{}), F64V);
}
inline F64V widen_high(F32V v) {
  return __builtin_convertvector(half_of<kWidth / 2>(v, std::make_integer_sequence<int, kWidth / 2>{}), F64V);
}
#endif

template <class V>
inline auto add_lanes(V v) {
  decltype(v[0] + 0) total = 0;
  for (int i = 0; i < static_cast<int>(sizeof(V) / sizeof(v[0])); ++i) total += v[i];
  return total;
}

// Counts from masks: a true lane is -1, so subtracting a mask counts it.
inline std::uint64_t count_lanes(I32V negative_counts) { return static_cast<std::uint64_t>(-add_lanes(negative_counts)); }

}  // namespace fp8scope::cpu::FP8SCOPE_ISA

namespace fp8scope {

// The shared FP8 math (quantize_element.h) on a vector of floats.
template <>
struct Lanes<cpu::FP8SCOPE_ISA::F32V> {
  using Bits = cpu::FP8SCOPE_ISA::U32V;
  using Mask = cpu::FP8SCOPE_ISA::I32V;
  static Bits to_bits(cpu::FP8SCOPE_ISA::F32V v) { return reinterpret_cast<Bits>(v); }
  static cpu::FP8SCOPE_ISA::F32V from_bits(Bits u) { return reinterpret_cast<cpu::FP8SCOPE_ISA::F32V>(u); }
};

}  // namespace fp8scope
