// One spelling for functions that run on both the CPU and the GPU, so the FP8 math is written once
// (the CUTLASS helper_macros.hpp pattern). Under nvcc the macro expands to __host__ __device__;
// under a plain C++ compiler to inline.
#pragma once

#include <cstdint>
#include <cstring>

// On the host the functions are always inlined: the CPU engine compiles them into several copies
// for different ISA levels (AVX2, AVX-512, ...), and an out-of-line copy shared through the
// linker could hand AVX-512 code to a CPU without it.
#if defined(__CUDACC__)
#define FP8SCOPE_HD __host__ __device__ __forceinline__
#else
#define FP8SCOPE_HD inline __attribute__((always_inline))
#endif

namespace fp8scope {

// Bit casts go through memcpy: defined behaviour on the host, a register move after optimization,
// and legal in device code.
FP8SCOPE_HD std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

FP8SCOPE_HD float bits_float(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Products and sums that must round on their own. The numerics contract rounds x*s to fp32 before
// the cast and Q*(1/s) before the error; a fused multiply-add would skip those roundings. Host code
// is compiled with -ffp-contract=off; on the device the _rn intrinsics are never contracted.
// V is float, or on the host a vector of floats (lanes.h).
template <class V>
FP8SCOPE_HD V mul_rn(V a, V b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

template <class V>
FP8SCOPE_HD V add_rn(V a, V b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

}  // namespace fp8scope
