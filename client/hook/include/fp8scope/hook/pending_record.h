// One record on its way from a training thread to the shared ring: reserved there (and in the
// device staging ring) on the training thread, its copies enqueued on the caller's stream, then
// finished by the publisher thread, which copies what was staged into it and publishes it, in
// ring order.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8scope/shm/shm_ring.h"

namespace fp8scope::hook {

// What only a grouped layout's sample needs: its shape, its block scales' size and its experts'
// tokens are the device's, read back by the publisher before the record is published.
struct GroupedParts {
  CUdeviceptr dims = 0;        // the gather kernel's dims_out for the matrix
  CUdeviceptr token_dims = 0;  // ... for the activation, whose columns are the tokens per expert (0: none)
  CUdeviceptr block_scales = 0, scale_bytes = 0;  // the block scales, staged after the codes, and their bytes_out
  std::uint32_t experts = 0, element_bits = 0;
  bool tokens_in_cols = true;  // which of the activation's dims_out entries counts each expert's tokens
  std::vector<std::uint64_t> tokens;  // declared tokens, written once the sizes are known
  std::string size_key;        // the key the matrix's size is learned under (ExpertGather)
};

struct PendingRecord {
  std::uint64_t ring_end = 0;  // publish up to here
  shm::RecordHeader* record = nullptr;
  std::uint64_t payload_bytes = 0;
  CUevent copied = nullptr;  // null: nothing to copy from the device
  CUdeviceptr staged = 0;    // the payload: codes, then the scale tensor
  CUdeviceptr staged_scale = 0, staged_alpha = 0;  // one fp32 each, into the record's header
  std::uint64_t staging_end = 0;   // release the staging ring up to here
  std::uint64_t device_bytes = 0;  // what to copy from `staged` (the rest of the payload is written here)
  // The operand's cast (cast_stash.h): its part, staged apart, follows the codes and scales in the
  // record; the stash keeps it until the copy ran.
  CUdeviceptr staged_cast = 0;
  std::uint64_t cast_bytes = 0, cast_id = 0;
  std::optional<GroupedParts> grouped;
};

}  // namespace fp8scope::hook
