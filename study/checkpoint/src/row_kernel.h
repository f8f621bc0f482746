// The checker's per-row loops are compiled for the baseline ISA and, on x86-64, again for
// x86-64-v3 (AVX2) and v4 (AVX-512), the CPU picking at load time (GCC target_clones), as the
// statistics engine's segment kernels are.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FP8SCOPE_ROW_KERNEL __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define FP8SCOPE_ROW_KERNEL
#endif
