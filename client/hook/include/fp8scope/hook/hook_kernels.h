// The hook's kernels (gather_kernel.cu), loaded once from their embedded PTX, which the driver
// JIT-compiles for the context's device (and caches across runs): the expert gathers
// (expert_gather.h) and the graph kernels (graph_plan.h, graph_recorder.h). Called under the
// capture lock.
#pragma once

#include <cuda.h>

#include "fp8scope/hook/graph_plan.h"
#include "fp8scope/hook/real_api.h"

namespace fp8scope::hook {

class HookKernels {
 public:
  explicit HookKernels(const DriverApi& cu) : cu_(cu) {}

  // Loads the module on first use; false when it cannot be (reported once on stderr).
  bool ready();

  CUfunction gather() const { return gather_; }
  CUfunction gather_scales() const { return gather_scales_; }

  // fp8scope_plan_copy on `stream` (under capture: a node of the graph), with a grid for `bytes`.
  bool plan_copy(CUdeviceptr plan, unsigned int slot, const PlanCopy& copy, unsigned long long bytes, CUstream stream);
  // fp8scope_plan_gather on `stream` (under capture: a node of the graph); its grid sized for
  // `bytes`, the most it is expected to copy.
  bool plan_gather(CUdeviceptr plan, unsigned int slot, const PlanGather& gather, unsigned long long bytes,
                   CUstream stream);
  // fp8scope_plan_set on `stream`.
  bool plan_set(CUdeviceptr plan, const PlanEntries& entries, CUstream stream);

 private:
  const DriverApi& cu_;
  enum class State { kUnset, kReady, kFailed } state_ = State::kUnset;
  CUmodule module_ = nullptr;  // kept for as long as the kernels may run: the process's life
  CUfunction gather_ = nullptr, gather_scales_ = nullptr, plan_copy_ = nullptr, plan_set_ = nullptr,
             plan_gather_ = nullptr;
};

}  // namespace fp8scope::hook
