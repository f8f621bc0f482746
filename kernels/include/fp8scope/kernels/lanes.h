// What a "lane" is for the shared FP8 math: one float (CUDA threads, the references) or a vector of
// floats (the CPU engine's SIMD loops, GCC/Clang vector extensions). The math in float_cast.h and
// quantize_element.h is written once against this trait; the CPU engine specializes it for its
// vector types, so the CPU and CUDA engines run the same source.
#pragma once

#include <cstdint>

#include "fp8scope/kernels/host_device.h"

namespace fp8scope {

template <class V>
struct Lanes;

template <>
struct Lanes<float> {
  using Bits = std::uint32_t;  // the lane's fp32 bit pattern
  using Mask = bool;           // a per-lane condition
  static FP8SCOPE_HD Bits to_bits(float v) { return float_bits(v); }
  static FP8SCOPE_HD float from_bits(Bits u) { return bits_float(u); }
};

// A constant in every lane (V{} + c broadcasts for vector types and is c for scalars).
template <class V, class C>
FP8SCOPE_HD V splat(C c) {
  return V{} + c;
}

}  // namespace fp8scope
