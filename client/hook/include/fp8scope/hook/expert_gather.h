// The experts of batched and grouped GEMMs, whose matrices only the device can reach: the gather
// kernels (gather_kernel.cu, hook_kernels.h) copy one
// expert's matrix and block scales into the staging ring on the caller's stream; a grouped layout's
// shape and its experts' tokens are learned there too and read back by the publisher (settle()).
// What a grouped matrix may take is learned per layer and operand from the sizes seen.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fp8scope/hook/device_staging.h"
#include "fp8scope/hook/gemm_operands.h"
#include "fp8scope/hook/hook_kernels.h"
#include "fp8scope/hook/pending_record.h"
#include "fp8scope/hook/real_api.h"

namespace fp8scope::hook {

class ExpertGather {
 public:
  ExpertGather(const DriverApi& cu, HookKernels& kernels, std::uint64_t staging_bytes, std::uint64_t ring_bytes);

  // The kernels, loaded on first use; false when they cannot be (then nothing is gathered).
  // Called under the capture lock.
  bool ready() { return kernels_.ready(); }

  // Copies matrix `index` of a device array of pointers (or a grouped layout's, sized on the
  // device) into dst, at most `capacity` bytes; dims_out as gather_kernel.cu defines it.
  bool launch(const void* pointers, std::uint32_t index, const DeviceDims& dims, std::uint32_t groups,
              const ExpertShape& shape, std::uint32_t element_bits, CUdeviceptr dst, std::uint64_t capacity,
              CUdeviceptr dims_out, CUstream stream);
  // One group's block scales (v.scales: a device array of pointers to them), sized on the device.
  bool launch_scales(const OperandView& v, std::uint32_t index, const ExpertShape& shape, CUdeviceptr dst,
                     std::uint64_t capacity, CUdeviceptr bytes_out, CUstream stream);
  // One fp32 (a scale or an alpha) into a header slot: from a device scalar, or the expert's entry
  // of a device array of pointers.
  bool stage_scalar(CUdeviceptr into, const void* scalar, const void* per_expert, std::uint32_t expert,
                    CUdeviceptr scratch, CUstream stream);

  // What one matrix of a grouped layout (or, with `scales`, its block scales) may copy: the largest
  // size seen for its layer and operand, with room to grow, or a share of the staging ring the
  // first time.
  std::uint64_t capacity(const std::string& size_key, bool scales = false);
  static std::string size_key(const std::string& layer, Operand operand);

  // On the publisher thread, after p's copies ran: its shape, codes and scales sizes and tokens
  // from the gathers' outputs, read through `staging`'s side stream. A matrix (or scale tensor)
  // that did not fit or was malformed makes the record padding (counted in `segment`); an empty one
  // (an expert without tokens) too, uncounted. False when a driver call failed.
  bool settle(PendingRecord& p, DeviceStaging& staging, shm::Header* segment);

  // An expert sample's header slot (DeviceStaging::kAlign bytes after its codes and block
  // scales): the scale and alpha for the record's header, the scalar gathers' scratch, the block
  // scales' bytes_out; and a grouped layout's dims_out after it.
  static constexpr std::uint64_t kSlotScale = 0, kSlotAlpha = 4, kSlotScaleScratch = 64, kSlotAlphaScratch = 128,
                                 kSlotScaleBytes = 192;
  static std::uint64_t dims_bytes(std::uint32_t experts) { return align_up(8 * (4 + 2ull * experts), DeviceStaging::kAlign); }

 private:
  void learn(const std::string& key, std::uint64_t needed);

  const DriverApi& cu_;
  HookKernels& kernels_;
  const std::uint64_t staging_bytes_, ring_bytes_;
  std::mutex sizes_mu_;
  std::unordered_map<std::string, std::uint64_t> sizes_;  // largest bytes seen per grouped matrix (and scales)
};

// A grouped sample's tokens, one uint64 per expert, after its codes and scales in the payload.
void write_tokens(shm::RecordHeader& r, std::uint64_t at, const std::vector<std::uint64_t>& tokens);

}  // namespace fp8scope::hook
