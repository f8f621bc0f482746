// The arguments of the hook's graph kernels (gather_kernel.cu), which the hook records into CUDA
// graphs at capture and which read, at every replay, the plan the hook wrote before it: a device
// table of one entry per recorded copy (its slot), whose destination is 0 when this replay copies
// nothing there. Plain data, shared by the kernels, the hook and the driver fixture that stands in
// for them.
#pragma once

#include "fp8scope/kernels/scale_tensor_size.h"

namespace fp8scope::hook {

inline constexpr unsigned int kPlanSegments = 12;
inline constexpr unsigned int kPlanEntries = 32;
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

// One slot of the plan: where this replay's copy goes (0: nowhere), and for an expert's gather
// (fp8scope_plan_gather), which the replay chooses, which expert and what it may copy.
struct PlanSlot {
  unsigned long long dst;
  unsigned long long rows, cols, ld;  // the expert's matrix, when the host knows its shape
  unsigned long long capacity;        // at most this many bytes of codes, from dst on
  unsigned long long scales_capacity; // and of block scales, after the codes (aligned)
  unsigned int index;                 // the expert
  unsigned int unused;
};

// fp8scope_plan_set's: table[slot[i]] = value[i] for i < count (a zero destination clears a slot).
struct PlanEntries {
  unsigned int slot[kPlanEntries];
  PlanSlot value[kPlanEntries];
  unsigned int count;
};

// fp8scope_plan_gather's: one expert's matrix of a batched or grouped GEMM, copied as
// fp8scope_gather copies it, with its block scales, its scalars and its layout's dims, to the
// slot's destination, laid out as the eager gather lays out a sample (expert_gather.h): the codes
// at dst, the block scales after them, a header slot after those, then the dims.
struct PlanGather {
  unsigned long long pointers;                          // device array of the experts' matrices
  unsigned long long rows_array, cols_array, ld_array;  // a grouped layout's (all 0: the slot's shape)
  unsigned int widths, groups, element_bits, k_is_outer;
  unsigned long long align;                             // the codes' and scales' places are rounded up to this
  unsigned long long scales;                            // device array of each group's block scales (0: none)
  ScaleGeometry geometry;
  // The activation's layout, whose dims give each expert's tokens (token_dims_at 0: not wanted).
  unsigned long long token_pointers, token_rows_array, token_cols_array, token_ld_array;
  unsigned int token_widths, unused;
  // fp32 scalars: a device scalar, or (per_expert) a device array of pointers, one per expert.
  unsigned long long scale, alpha;
  unsigned int scale_per_expert, alpha_per_expert;
  // Places from the header slot: each scalar's, the block scales' bytes_out, the dims_out of the
  // matrix and of the activation (an unwanted scalar or dims: ~0).
  unsigned long long scale_at, alpha_at, scale_bytes_at, dims_at, token_dims_at;
};

}  // namespace fp8scope::hook
