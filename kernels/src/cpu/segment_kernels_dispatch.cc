#include "segment_kernels.h"

namespace fp8scope::cpu {

namespace baseline { extern const SegmentKernels kKernels; }
#if defined(FP8SCOPE_HAVE_X86_LEVELS)
namespace x86_64_v3 { extern const SegmentKernels kKernels; }
namespace x86_64_v4 { extern const SegmentKernels kKernels; }
#endif

std::vector<const SegmentKernels*> runnable_segment_kernels() {
  std::vector<const SegmentKernels*> out;
#if defined(FP8SCOPE_HAVE_X86_LEVELS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    out.push_back(&x86_64_v4::kKernels);
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
    out.push_back(&x86_64_v3::kKernels);
  }
#endif
  out.push_back(&baseline::kKernels);
  return out;
}

}  // namespace fp8scope::cpu
