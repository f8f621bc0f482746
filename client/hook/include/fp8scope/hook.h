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
#define FP8SCOPE_HOOK_API_VERSION 3
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

/* API version 2: mixture-of-experts layers. A range named "<layer>.experts.<N>" (or
 * "<layer>.expert.<N>") names expert N of "<layer>.experts" without a call. */

/* The calling thread's GEMMs belong to `expert` until this is called again; -1: to none. */
void fp8scope_set_expert(int32_t expert);

/* Tokens routed to each of `experts` experts (zero included) for the GEMMs of the innermost range:
 * its GEMMs of each role are then those of the experts with tokens, in index order (as TE's
 * GroupedLinear runs one GEMM per such expert, so names never shift when an expert gets none),
 * and the rows of a grouped GEMM's group past its tokens are padding, which the daemon checks is
 * zero. At most 65536 experts; larger counts are ignored. */
void fp8scope_expert_tokens(const uint64_t* tokens, uint32_t experts);

/* API version 3: modules that run several GEMMs. The GEMMs the innermost range runs, in the order
 * it runs them, repeated: items separated by spaces, each "<name>/<role>" with the role fprop,
 * dgrad or wgrad and the name that of the GEMM inside the module ("" for the module's own). The
 * i-th GEMM of the range is named "<range>.<name>" and takes the role when its layout cannot tell
 * it; one whose layout can takes the next item of its role. Transformer Engine's LayerNormMLP:
 * "fc1/fprop fc2/fprop" in its forward range, "fc2/dgrad fc2/wgrad fc1/dgrad fc1/wgrad" in its
 * backward one. At most 16 items, names of at most 24 printable characters without '#'; a malformed
 * sequence is ignored. */
void fp8scope_range_gemms(const char* sequence);

#ifdef __cplusplus
}
#endif

#endif /* FP8SCOPE_HOOK_H_ */
