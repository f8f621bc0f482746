#include "fp8scope/hook/hook_kernels.h"

#include <algorithm>
#include <cstdio>

#include "gather_kernel_ptx.h"

namespace fp8scope::hook {

bool HookKernels::ready() {
  if (state_ != State::kUnset) return state_ == State::kReady;
  state_ = State::kFailed;
  RelaxedCaptureMode relaxed(cu_);
  const CUresult loaded =
      cu_.module_load_data == nullptr ? CUDA_ERROR_NOT_SUPPORTED : cu_.module_load_data(&module_, kGatherKernelPtx);
  const auto get = [&](CUfunction& f, const char* name) {
    return cu_.module_get_function(&f, module_, name) == CUDA_SUCCESS;
  };
  if (loaded != CUDA_SUCCESS || !get(gather_, "fp8scope_gather") || !get(gather_scales_, "fp8scope_gather_scales") ||
      !get(plan_copy_, "fp8scope_plan_copy") || !get(plan_set_, "fp8scope_plan_set") ||
      !get(plan_gather_, "fp8scope_plan_gather") || cu_.launch_kernel == nullptr) {
    std::fprintf(stderr,
                 "fp8scope hook: cannot load the hook's kernels (CUDA error %d; the driver may be older than their "
                 "PTX); batched, grouped and graphed GEMMs are not sampled\n",
                 static_cast<int>(loaded));
    return false;
  }
  state_ = State::kReady;
  return true;
}

namespace {

constexpr unsigned int kThreads = 256;

// A graph node's kernel (plan, slot, its argument block): the driver copies the parameters at the
// call, so they may live on this stack.
template <class Args>
bool launch_on_slot(const DriverApi& cu, CUfunction f, CUdeviceptr plan, unsigned int slot, const Args& args,
                    unsigned int blocks, CUstream stream) {
  CUdeviceptr p_plan = plan;
  unsigned int p_slot = slot;
  Args p_args = args;
  void* params[] = {&p_plan, &p_slot, &p_args};
  return cu.launch_kernel(f, blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS;
}

}  // namespace

bool HookKernels::plan_copy(CUdeviceptr plan, unsigned int slot, const PlanCopy& copy, unsigned long long bytes,
                            CUstream stream) {
  // Enough blocks to copy 16 bytes a thread a few times over; a replay nobody samples pays for
  // launching them, so no more.
  const auto blocks = static_cast<unsigned int>(std::clamp<unsigned long long>(bytes / (kThreads * 16 * 4), 1, 128));
  return launch_on_slot(cu_, plan_copy_, plan, slot, copy, blocks, stream);
}

bool HookKernels::plan_gather(CUdeviceptr plan, unsigned int slot, const PlanGather& gather, unsigned long long bytes,
                              CUstream stream) {
  // One byte a thread, as the eager gather copies.
  const auto blocks = static_cast<unsigned int>(std::clamp<unsigned long long>(bytes / (kThreads * 8), 1, 1024));
  return launch_on_slot(cu_, plan_gather_, plan, slot, gather, blocks, stream);
}

bool HookKernels::plan_set(CUdeviceptr plan, const PlanEntries& entries, CUstream stream) {
  CUdeviceptr p_plan = plan;
  PlanEntries p_entries = entries;
  void* params[] = {&p_plan, &p_entries};
  return cu_.launch_kernel(plan_set_, 1, 1, 1, kPlanEntries, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS;
}

}  // namespace fp8scope::hook
