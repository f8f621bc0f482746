/* The C API of libfp8scope_hook.so, for training code that can say more than the hook infers from
 * cuBLAS calls and NVTX ranges. The library is loaded with LD_PRELOAD (`fp8scope run` does it);
 * code that must also run without it resolves these with dlsym(RTLD_DEFAULT, "fp8scope_step") and
 * skips them when absent, as client/python/fp8scope.py does. Every function returns at once: none
 * blocks, allocates on the GPU or fails the caller. Strings are copied before the call returns. */
#ifndef FP8SCOPE_HOOK_H_
#define FP8SCOPE_HOOK_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a function is added; never when one changes (a change is a new name). */
#define FP8SCOPE_HOOK_API_VERSION 1
uint32_t fp8scope_hook_api_version(void);

/* The training loop entered `step`. Samples carry it and the policy's every-N counts it; once
 * called, it replaces the hook's own step detection for the rest of the process. */
void fp8scope_step(uint64_t step);

/* A scalar of the run at `step` ("loss", "grad_norm", "lr"), stored in the daemon's history.
 * `name`: 1..63 printable ASCII characters; anything else is ignored. */
void fp8scope_log_scalar(const char* name, uint64_t step, double value);

/* Name the GEMMs that follow until the matching pop, like an NVTX range (the hook reads NVTX
 * ranges too; this is for code without NVTX). A name ending in "/fprop", "/dgrad" or "/wgrad" sets
 * the role of the GEMMs inside; "/forward" and "/backward" narrow it. */
void fp8scope_range_push(const char* name);
void fp8scope_range_pop(void);

#ifdef __cplusplus
}
#endif

#endif /* FP8SCOPE_HOOK_H_ */
