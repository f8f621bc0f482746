// How many bytes a scale tensor takes, from its layout's geometry (the scale layout table,
// vocabulary/scale_layout.h), in one spelling for the host and for the hook's gather kernel, which
// sizes each group's scales of a grouped GEMM where only the device knows the group's shape.
#pragma once

#include <cstdint>

#include "fp8scope/kernels/host_device.h"

namespace fp8scope {

// Block extents along M/N and K (0: the whole dimension), the multiples the grid of block scales
// pads its counts to, and the bytes of one scale.
struct ScaleGeometry {
  std::uint32_t block_mn = 0, block_k = 0, mn_pad = 1, k_pad = 1, element_bytes = 0;
};

// Bytes of the scale tensor of an operand of mn (its M or N) by k elements; 0 when it is empty.
FP8SCOPE_HD std::uint64_t scale_tensor_bytes_of(const ScaleGeometry& g, std::uint64_t mn, std::uint64_t k) {
  if (mn == 0 || k == 0 || g.mn_pad == 0 || g.k_pad == 0) return 0;
  const std::uint64_t block_mn = g.block_mn == 0 ? mn : g.block_mn, block_k = g.block_k == 0 ? k : g.block_k;
  const std::uint64_t mn_blocks = (mn + block_mn - 1) / block_mn, k_blocks = (k + block_k - 1) / block_k;
  const std::uint64_t mn_stored = (mn_blocks + g.mn_pad - 1) / g.mn_pad * g.mn_pad;
  const std::uint64_t k_stored = (k_blocks + g.k_pad - 1) / g.k_pad * g.k_pad;
  return mn_stored * k_stored * g.element_bytes;
}

}  // namespace fp8scope
