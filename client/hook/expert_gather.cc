#include "fp8scope/hook/expert_gather.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fp8scope/kernels/scale_layout.h"

namespace fp8scope::hook {
namespace {

// A grouped matrix may grow by this much (more tokens) and still fit what the largest one of its
// kind reserved; one never seen gets this fraction of the staging (or ring) bytes.
constexpr std::uint64_t kGroupedGrowth = 2;
constexpr std::uint64_t kGroupedFirstShare = 64;
// Block scales are a fraction of their codes (1/16 of FP8 codes for MXFP8, with padding): a
// quarter of the codes' first share fits them.
constexpr std::uint64_t kGroupedFirstScaleShare = 4 * kGroupedFirstShare;
constexpr std::size_t kMaxLearnedSizes = 4096;

std::string scales_key(const std::string& size_key) { return size_key + "\x1fscales"; }

}  // namespace

void write_tokens(shm::RecordHeader& r, std::uint64_t at, const std::vector<std::uint64_t>& tokens) {
  std::memcpy(reinterpret_cast<std::byte*>(&r + 1) + at, tokens.data(), 8 * tokens.size());
  r.tokens_bytes = 8 * tokens.size();
}

ExpertGather::ExpertGather(const DriverApi& cu, HookKernels& kernels, std::uint64_t staging_bytes, std::uint64_t ring_bytes)
    : cu_(cu), kernels_(kernels), staging_bytes_(staging_bytes), ring_bytes_(ring_bytes) {}

std::string ExpertGather::size_key(const std::string& layer, Operand operand) {
  return layer + '\x1f' + operand_name(operand);
}

bool ExpertGather::launch(const void* pointers, std::uint32_t index, const DeviceDims& dims, std::uint32_t groups,
                          const ExpertShape& shape, std::uint32_t element_bits, CUdeviceptr dst, std::uint64_t capacity,
                          CUdeviceptr dims_out, CUstream stream) {
  // The kernel's parameters, in its order and sizes (gather_kernel.cu).
  CUdeviceptr p_pointers = reinterpret_cast<CUdeviceptr>(pointers);
  unsigned int p_index = index, p_widths = (dims.rows_cols_64 ? 1u : 0u) | (dims.ld_64 ? 2u : 0u), p_groups = groups;
  CUdeviceptr p_rows_array = reinterpret_cast<CUdeviceptr>(dims.rows), p_cols_array = reinterpret_cast<CUdeviceptr>(dims.cols),
              p_ld_array = reinterpret_cast<CUdeviceptr>(dims.ld);
  unsigned long long p_rows = shape.rows, p_cols = shape.cols, p_ld = static_cast<unsigned long long>(shape.ld),
                     p_capacity = capacity;
  unsigned int p_bits = element_bits;
  CUdeviceptr p_dst = dst, p_dims_out = dims_out;
  void* params[] = {&p_pointers, &p_index, &p_rows_array, &p_cols_array, &p_ld_array, &p_widths, &p_groups, &p_rows,
                    &p_cols, &p_ld, &p_bits, &p_dst, &p_capacity, &p_dims_out};
  constexpr unsigned int kThreads = 256;
  const auto blocks = static_cast<unsigned int>(std::clamp<std::uint64_t>(capacity / (kThreads * 8), 1, 1024));
  return cu_.launch_kernel(kernels_.gather(), blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS;
}

bool ExpertGather::launch_scales(const OperandView& v, std::uint32_t index, const ExpertShape& shape, CUdeviceptr dst,
                                 std::uint64_t capacity, CUdeviceptr bytes_out, CUstream stream) {
  // The kernel's parameters, in its order and sizes (gather_kernel.cu).
  CUdeviceptr p_pointers = reinterpret_cast<CUdeviceptr>(v.scales), p_rows_array = reinterpret_cast<CUdeviceptr>(v.device_dims.rows),
              p_cols_array = reinterpret_cast<CUdeviceptr>(v.device_dims.cols), p_dst = dst, p_bytes_out = bytes_out;
  unsigned int p_index = index, p_widths = v.device_dims.rows_cols_64 ? 1u : 0u, p_k_is_outer = v.k_is_outer ? 1u : 0u;
  unsigned long long p_rows = shape.rows, p_cols = shape.cols, p_capacity = capacity;
  ScaleGeometry p_geometry = scale_geometry(v.scale_layout);
  void* params[] = {&p_pointers, &p_index, &p_rows_array, &p_cols_array, &p_widths, &p_rows, &p_cols, &p_k_is_outer,
                    &p_geometry, &p_dst, &p_capacity, &p_bytes_out};
  constexpr unsigned int kThreads = 256;
  const auto blocks = static_cast<unsigned int>(std::clamp<std::uint64_t>(capacity / (kThreads * 8), 1, 256));
  return cu_.launch_kernel(kernels_.gather_scales(), blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS;
}

bool ExpertGather::stage_scalar(CUdeviceptr into, const void* scalar, const void* per_expert, std::uint32_t expert,
                                CUdeviceptr scratch, CUstream stream) {
  if (per_expert != nullptr) {
    return launch(per_expert, expert, DeviceDims{}, 0, ExpertShape{1, 1, 1}, 32, into, sizeof(float), scratch, stream);
  }
  return cu_.memcpy_dtod_async(into, reinterpret_cast<CUdeviceptr>(scalar), sizeof(float), stream) == CUDA_SUCCESS;
}

std::uint64_t ExpertGather::capacity(const std::string& size_key, bool scales) {
  std::lock_guard<std::mutex> lock(sizes_mu_);
  const auto it = sizes_.find(scales ? scales_key(size_key) : size_key);
  // Unseen: a small share, so that a step sampling every expert of a layer for the first time
  // fits in the ring; an expert larger than that is counted too_large and sizes the next call.
  const std::uint64_t share =
      std::min(staging_bytes_, ring_bytes_) / (scales ? kGroupedFirstScaleShare : kGroupedFirstShare);
  return it == sizes_.end() ? share : std::min(staging_bytes_ / 8, std::max<std::uint64_t>(it->second * kGroupedGrowth, 4096));
}

void ExpertGather::learn(const std::string& key, std::uint64_t needed) {
  std::lock_guard<std::mutex> lock(sizes_mu_);
  if (sizes_.size() >= kMaxLearnedSizes && !sizes_.count(key)) sizes_.clear();
  std::uint64_t& largest = sizes_[key];
  largest = std::max(largest, needed);
}

bool ExpertGather::settle(PendingRecord& p, DeviceStaging& staging, shm::Header* segment) {
  GroupedParts& g = *p.grouped;
  std::vector<std::uint64_t> dims(4 + 2ull * g.experts), token_dims(g.token_dims != 0 ? dims.size() : 0);
  std::uint64_t scale_bytes[2] = {0, 0};  // the block scales' size, and what was copied
  const CUstream side = staging.side();
  if (cu_.memcpy_dtoh_async(dims.data(), g.dims, 8 * dims.size(), side) != CUDA_SUCCESS ||
      (g.token_dims != 0 &&
       cu_.memcpy_dtoh_async(token_dims.data(), g.token_dims, 8 * token_dims.size(), side) != CUDA_SUCCESS) ||
      (g.scale_bytes != 0 && cu_.memcpy_dtoh_async(scale_bytes, g.scale_bytes, sizeof scale_bytes, side) != CUDA_SUCCESS) ||
      !staging.side_synchronized()) {
    return false;
  }
  shm::RecordHeader& r = *p.record;
  const std::uint64_t rows = dims[0], cols = dims[1], copied = dims[3];
  const std::uint64_t needed = rows * g.element_bits / 8 * cols;
  learn(g.size_key, needed);
  if (g.scale_bytes != 0) learn(scales_key(g.size_key), scale_bytes[0]);
  const bool scales_missing = g.scale_bytes != 0 && scale_bytes[1] == 0;
  if (copied == 0 || rows == 0 || cols == 0 || scales_missing) {
    r.kind = shm::RecordKind::kPadding;
    const bool empty = (rows == 0 || cols == 0) && dims[2] >= rows;  // an expert without tokens
    if (!empty) {
      const bool too_large = needed > p.device_bytes || (scales_missing && scale_bytes[0] != 0);
      shm::count_drop(segment, too_large ? shm::DropReason::kTooLarge : shm::DropReason::kUnsupportedLayout);
    }
    return true;
  }
  r.shape[0] = static_cast<std::int64_t>(cols);  // column major: each column a row of the tensor
  r.shape[1] = static_cast<std::int64_t>(rows);
  r.leading_dimension = static_cast<std::int64_t>(dims[2]);
  p.device_bytes = copied;
  r.scale_bytes = scale_bytes[1];
  std::uint64_t tokens_bytes = 0;
  if (!token_dims.empty()) {
    g.tokens.resize(g.experts);
    for (std::uint32_t e = 0; e < g.experts; ++e) g.tokens[e] = token_dims[(g.tokens_in_cols ? 5 : 4) + 2 * e];
  }
  if (!g.tokens.empty()) {
    write_tokens(r, copied + r.scale_bytes, g.tokens);
    tokens_bytes = r.tokens_bytes;
  }
  r.payload_bytes = copied + r.scale_bytes + tokens_bytes;
  p.payload_bytes = r.payload_bytes;
  return true;
}

}  // namespace fp8scope::hook
