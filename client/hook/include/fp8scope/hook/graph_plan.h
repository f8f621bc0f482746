// The arguments of the hook's graph kernels (gather_kernel.cu), which the hook records into CUDA
// graphs at capture and which read, at every replay, the plan the hook wrote before it: a device
// table of one destination per recorded copy (its slot), 0 when this replay copies nothing there.
// Plain data, shared by the kernels, the hook and the driver fixture that stands in for them.
#pragma once

namespace fp8scope::hook {

inline constexpr unsigned int kPlanSegments = 12;
inline constexpr unsigned int kPlanEntries = 64;
// A segment whose source is an address, not a place in another slot's destination.
inline constexpr unsigned int kPlanDirect = 0xFFFFFFFFu;

// `batches` matrices of `rows` rows of `width` bytes, `pitch` bytes apart at the source and
// `batch_pitch` between matrices, packed at the destination from `offset` on.
struct PlanSegment {
  unsigned long long src;  // a device address; with from_slot, an offset into that slot's destination
  unsigned long long offset;
  unsigned long long rows, width, pitch;
  unsigned long long batches, batch_pitch;
  unsigned int from_slot;  // kPlanDirect, or the slot whose destination holds the source (nothing when unset)
  unsigned int zeros;      // nonzero: the segment is written with zeros, nothing is read
};

// fp8scope_plan_copy's: what one recorded copy writes to its slot's destination.
struct PlanCopy {
  PlanSegment segment[kPlanSegments];
  unsigned int count;
};

// fp8scope_plan_set's: table[slot[i]] = dst[i] for i < count (0 clears a slot).
struct PlanEntries {
  unsigned int slot[kPlanEntries];
  unsigned long long dst[kPlanEntries];
  unsigned int count;
};

}  // namespace fp8scope::hook
