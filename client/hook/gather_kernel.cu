// The kernels the hook runs on the GPU: they copy one matrix of a batched or grouped GEMM whose
// address (and, for cuBLASLt's grouped layouts, shape) only the device knows, and its block
// scales, in stream order on the caller's stream, so the hook never reads device memory from the
// host and never waits. The hook loads them from this file's PTX (gather_kernel.ptx, embedded;
// cuModuleLoadData JIT-compiles it for the context's device) and links no CUDA runtime.
//
// fp8scope_gather(pointers, index, rows_array, cols_array, ld_array, widths, groups,
//                 rows, cols, ld, element_bits, dst, capacity, dims_out):
//   pointers      device array of device pointers, one per batch element or group
//   index         which one to copy
//   rows_array..  a grouped layout's device arrays of rows, cols and ld per group (int32; int64 for
//                 rows and cols when widths bit 0 is set, for ld when bit 1 is), or all null: then
//                 rows, cols and ld (elements) hold for every one
//   groups        entries of those arrays
//   the matrix    column major: `rows` contiguous elements of element_bits bits per column, `cols`
//                 columns, `ld` elements apart
//   dst           receives the matrix packed (rows * element_bits / 8 bytes a column), when it is at
//                 most `capacity` bytes and well formed (ld >= rows, whole bytes a column)
//   dims_out      (written by thread 0) [0..2] rows, cols, ld of the matrix copied, [3] the bytes
//                 copied (0: nothing, it did not fit or was malformed), then rows and cols of every
//                 group g at [4 + 2g] and [5 + 2g] (grouped layouts only)
//
// fp8scope_gather_scales(pointers, index, rows_array, cols_array, widths, rows, cols, k_is_outer,
//                        geometry, dst, capacity, bytes_out):
//   pointers      device array of device pointers to each group's scale tensor
//   index..cols   the matrix's shape as fp8scope_gather reads it (column major, rows contiguous)
//   k_is_outer    the GEMM's K runs along the columns (else along the contiguous rows)
//   geometry      the scale layout's ScaleGeometry (kernels/scale_tensor_size.h), by value
//   dst           receives the group's scale tensor when it is at most `capacity` bytes
//   bytes_out     (written by thread 0) [0] the scale tensor's bytes, [1] the bytes copied
// Every thread computes the same shape, so no thread waits for another.
//
// The graph kernels (graph_plan.h), recorded into a CUDA graph at capture, one node per copy the
// hook may make there; `plan` is the hook's table of PlanSlots, one per node:
// fp8scope_plan_copy(plan, slot, copy):
//   nothing when plan[slot].dst is 0 (a replay nobody samples: every thread reads one word and
//   returns); else each segment of `copy` packed to plan[slot].dst + its offset. A segment read
//   from another slot's destination is skipped while that slot is 0, and when it is this very place.
// fp8scope_plan_gather(plan, slot, gather):
//   nothing when plan[slot].dst is 0; else expert plan[slot].index of a batched or grouped GEMM
//   as fp8scope_gather and fp8scope_gather_scales copy it (the slot's shape and capacities, which
//   the hook chooses at each replay), with its scalars and dims, laid out as PlanGather says.
// fp8scope_plan_set(plan, entries):
//   plan[entries.slot[i]] = entries.value[i]: the hook's plan for a replay, written on its stream
//   before the replay (and cleared after it).

#include "fp8scope/hook/graph_plan.h"
#include "fp8scope/kernels/scale_tensor_size.h"

__device__ unsigned long long dim_at(const void* array, bool wide, unsigned int i) {
  return wide ? static_cast<unsigned long long>(static_cast<const long long*>(array)[i])
                 : static_cast<unsigned long long>(static_cast<long long>(static_cast<const int*>(array)[i]));
}

__device__ unsigned long long global_thread() {
  return blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
}

__device__ unsigned long long grid_threads() { return static_cast<unsigned long long>(gridDim.x) * blockDim.x; }

// fp8scope_gather's work, for it and for fp8scope_plan_gather.
__device__ void gather_matrix(const unsigned long long* pointers, unsigned int index, const void* rows_array,
                              const void* cols_array, const void* ld_array, unsigned int widths, unsigned int groups,
                              unsigned long long rows, unsigned long long cols, unsigned long long ld,
                              unsigned int element_bits, unsigned char* dst, unsigned long long capacity,
                              unsigned long long* dims_out) {
  const bool grouped = rows_array != nullptr && cols_array != nullptr && ld_array != nullptr;
  if (grouped) {
    rows = dim_at(rows_array, widths & 1u, index);
    cols = dim_at(cols_array, widths & 1u, index);
    ld = dim_at(ld_array, widths & 2u, index);
  }
  const unsigned long long column_bits = rows * element_bits;
  const unsigned long long column_bytes = column_bits / 8, pitch = ld * element_bits / 8;
  // Negative dimensions read as huge unsigned numbers: the size checks refuse them.
  const bool well_formed = rows < (1ull << 40) && cols < (1ull << 40) && ld >= rows && column_bits % 8 == 0;
  const unsigned long long bytes = well_formed ? column_bytes * cols : 0;
  const bool copy = well_formed && bytes <= capacity && pointers[index] != 0;
  const unsigned long long thread = global_thread();
  if (thread == 0) {
    dims_out[0] = rows;
    dims_out[1] = cols;
    dims_out[2] = ld;
    dims_out[3] = copy ? bytes : 0;
    for (unsigned int g = 0; grouped && g < groups; ++g) {
      dims_out[4 + 2 * g] = dim_at(rows_array, widths & 1u, g);
      dims_out[5 + 2 * g] = dim_at(cols_array, widths & 1u, g);
    }
  }
  if (!copy) return;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(pointers[index]);
  const unsigned long long stride = grid_threads();
  for (unsigned long long i = thread; i < bytes; i += stride) {
    const unsigned long long column = i / column_bytes, offset = i % column_bytes;
    dst[i] = src[column * pitch + offset];
  }
}

// fp8scope_gather_scales's work, for it and for fp8scope_plan_gather.
__device__ void gather_scale_tensor(const unsigned long long* pointers, unsigned int index, const void* rows_array,
                                    const void* cols_array, unsigned int widths, unsigned long long rows,
                                    unsigned long long cols, unsigned int k_is_outer,
                                    const fp8scope::ScaleGeometry& geometry, unsigned char* dst,
                                    unsigned long long capacity, unsigned long long* bytes_out) {
  if (rows_array != nullptr && cols_array != nullptr) {
    rows = dim_at(rows_array, widths & 1u, index);
    cols = dim_at(cols_array, widths & 1u, index);
  }
  const bool well_formed = rows < (1ull << 40) && cols < (1ull << 40);
  const unsigned long long bytes =
      well_formed ? fp8scope::scale_tensor_bytes_of(geometry, k_is_outer ? rows : cols, k_is_outer ? cols : rows) : 0;
  const bool copy = bytes != 0 && bytes <= capacity && pointers[index] != 0;
  const unsigned long long thread = global_thread();
  if (thread == 0) {
    bytes_out[0] = bytes;
    bytes_out[1] = copy ? bytes : 0;
  }
  if (!copy) return;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(pointers[index]);
  const unsigned long long stride = grid_threads();
  for (unsigned long long i = thread; i < bytes; i += stride) dst[i] = src[i];
}

extern "C" __global__ void fp8scope_gather(const unsigned long long* pointers, unsigned int index, const void* rows_array,
                                           const void* cols_array, const void* ld_array, unsigned int widths,
                                           unsigned int groups, unsigned long long rows, unsigned long long cols,
                                           unsigned long long ld, unsigned int element_bits, unsigned char* dst,
                                           unsigned long long capacity, unsigned long long* dims_out) {
  gather_matrix(pointers, index, rows_array, cols_array, ld_array, widths, groups, rows, cols, ld, element_bits, dst,
                capacity, dims_out);
}

extern "C" __global__ void fp8scope_gather_scales(const unsigned long long* pointers, unsigned int index,
                                                  const void* rows_array, const void* cols_array, unsigned int widths,
                                                  unsigned long long rows, unsigned long long cols,
                                                  unsigned int k_is_outer, fp8scope::ScaleGeometry geometry,
                                                  unsigned char* dst, unsigned long long capacity,
                                                  unsigned long long* bytes_out) {
  gather_scale_tensor(pointers, index, rows_array, cols_array, widths, rows, cols, k_is_outer, geometry, dst, capacity,
                      bytes_out);
}

// Copies one segment in units of T (the widest its addresses, rows and pitches allow).
template <class T>
__device__ void copy_segment(const fp8scope::hook::PlanSegment& s, const unsigned char* src, unsigned char* dst,
                             unsigned long long thread, unsigned long long stride) {
  const unsigned long long row_units = s.width / sizeof(T), matrix_units = row_units * s.rows;
  const unsigned long long units = matrix_units * s.batches;
  T* out = reinterpret_cast<T*>(dst);
  for (unsigned long long i = thread; i < units; i += stride) {
    if (src == nullptr) {
      out[i] = T{};
      continue;
    }
    const unsigned long long batch = i / matrix_units, in_matrix = i % matrix_units;
    const unsigned long long row = in_matrix / row_units, unit = in_matrix % row_units;
    out[i] = *reinterpret_cast<const T*>(src + batch * s.batch_pitch + row * s.pitch + unit * sizeof(T));
  }
}

extern "C" __global__ void fp8scope_plan_copy(const fp8scope::hook::PlanSlot* plan, unsigned int slot,
                                              fp8scope::hook::PlanCopy copy) {
  const unsigned long long base = plan[slot].dst;
  if (base == 0) return;
  const unsigned long long thread = global_thread(), stride = grid_threads();
  for (unsigned int k = 0; k < copy.count && k < fp8scope::hook::kPlanSegments; ++k) {
    const fp8scope::hook::PlanSegment& s = copy.segment[k];
    unsigned long long from = s.src;
    if (s.from_slot != fp8scope::hook::kPlanDirect) {
      const unsigned long long other = plan[s.from_slot].dst;
      if (other == 0 || other + s.src == base + s.offset) continue;
      from = other + s.src;
    }
    const unsigned char* src = s.zeros != 0 ? nullptr : reinterpret_cast<const unsigned char*>(from);
    unsigned char* dst = reinterpret_cast<unsigned char*>(base + s.offset);
    const unsigned long long alignment = from | (base + s.offset) | s.width | s.pitch | s.batch_pitch;
    if (alignment % 16 == 0) {
      copy_segment<uint4>(s, src, dst, thread, stride);
    } else if (alignment % 4 == 0) {
      copy_segment<unsigned int>(s, src, dst, thread, stride);
    } else {
      copy_segment<unsigned char>(s, src, dst, thread, stride);
    }
  }
}

extern "C" __global__ void fp8scope_plan_set(fp8scope::hook::PlanSlot* plan, fp8scope::hook::PlanEntries entries) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < entries.count && i < fp8scope::hook::kPlanEntries) plan[entries.slot[i]] = entries.value[i];
}

__device__ unsigned long long aligned(unsigned long long n, unsigned long long align) {
  return align == 0 ? n : (n + align - 1) / align * align;
}

__device__ float expert_scalar(unsigned long long scalar, bool per_expert, unsigned int expert) {
  const float* at = per_expert ? reinterpret_cast<const float* const*>(scalar)[expert]
                               : reinterpret_cast<const float*>(scalar);
  return at != nullptr ? *at : 0.0f;
}

extern "C" __global__ void fp8scope_plan_gather(const fp8scope::hook::PlanSlot* plan, unsigned int slot,
                                                fp8scope::hook::PlanGather g) {
  const fp8scope::hook::PlanSlot s = plan[slot];
  if (s.dst == 0) return;
  constexpr unsigned long long kNone = ~0ull;
  unsigned char* codes = reinterpret_cast<unsigned char*>(s.dst);
  unsigned char* scales = codes + aligned(s.capacity, g.align);
  unsigned char* header = scales + (g.scales != 0 ? aligned(s.scales_capacity, g.align) : 0);
  const auto* pointers = reinterpret_cast<const unsigned long long*>(g.pointers);
  const void* rows_array = reinterpret_cast<const void*>(g.rows_array);
  const void* cols_array = reinterpret_cast<const void*>(g.cols_array);
  gather_matrix(pointers, s.index, rows_array, cols_array, reinterpret_cast<const void*>(g.ld_array), g.widths, g.groups,
                s.rows, s.cols, s.ld, g.element_bits, codes, s.capacity,
                reinterpret_cast<unsigned long long*>(header + g.dims_at));
  if (g.scales != 0) {
    gather_scale_tensor(reinterpret_cast<const unsigned long long*>(g.scales), s.index, rows_array, cols_array, g.widths,
                        s.rows, s.cols, g.k_is_outer, g.geometry, scales, s.scales_capacity,
                        reinterpret_cast<unsigned long long*>(header + g.scale_bytes_at));
  }
  if (g.token_dims_at != kNone) {  // the activation's shapes only: nothing copied
    gather_matrix(reinterpret_cast<const unsigned long long*>(g.token_pointers), s.index,
                  reinterpret_cast<const void*>(g.token_rows_array), reinterpret_cast<const void*>(g.token_cols_array),
                  reinterpret_cast<const void*>(g.token_ld_array), g.token_widths, g.groups, 0, 0, 0, 8, codes, 0,
                  reinterpret_cast<unsigned long long*>(header + g.token_dims_at));
  }
  if (global_thread() != 0) return;
  if (g.scale_at != kNone) {
    *reinterpret_cast<float*>(header + g.scale_at) = expert_scalar(g.scale, g.scale_per_expert != 0, s.index);
  }
  if (g.alpha_at != kNone) {
    *reinterpret_cast<float*>(header + g.alpha_at) = expert_scalar(g.alpha, g.alpha_per_expert != 0, s.index);
  }
}
