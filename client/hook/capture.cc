#include "fp8scope/hook/capture.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "fp8scope/hook/row_scaled_gemm.h"
#include "fp8scope/kernels/scale_layout.h"
#include "gather_kernel_ptx.h"

namespace fp8scope::hook {
namespace {

constexpr std::uint64_t kStagingAlign = 256;
constexpr auto kKeepAliveEvery = std::chrono::milliseconds(100);

std::uint64_t align_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }

void copy_text(char* dst, std::size_t size, const char* src) { std::snprintf(dst, size, "%s", src == nullptr ? "" : src); }

void write_tokens(shm::RecordHeader& r, std::uint64_t at, const std::vector<std::uint64_t>& tokens) {
  std::memcpy(reinterpret_cast<std::byte*>(&r + 1) + at, tokens.data(), 8 * tokens.size());
  r.tokens_bytes = 8 * tokens.size();
}

// The gather kernel's dims_out: 4 values, then rows and cols of each group.
std::uint64_t dims_bytes(std::uint32_t experts) { return align_up(8 * (4 + 2ull * experts), kStagingAlign); }

// Offsets in an expert sample's header slot (kStagingAlign bytes after the codes and block scales):
// the scale and alpha for the record's header, the scalar gathers' scratch, the block scales' bytes_out.
constexpr std::uint64_t kSlotScale = 0, kSlotAlpha = 4, kSlotScaleScratch = 64, kSlotAlphaScratch = 128,
                        kSlotScaleBytes = 192;

// A grouped matrix may grow by this much (more tokens) and still fit what the largest one of its
// kind reserved; one never seen gets this fraction of the staging (or ring) bytes.
constexpr std::uint64_t kGroupedGrowth = 2;
constexpr std::uint64_t kGroupedFirstShare = 64;
// Block scales are a fraction of their codes (1/16 of FP8 codes for MXFP8, with padding): a
// quarter of the codes' first share fits them.
constexpr std::uint64_t kGroupedFirstScaleShare = 4 * kGroupedFirstShare;

// What a grouped matrix's reservation is learned by: its layer and operand, shared by the experts,
// whose shapes differ by their tokens only. Its block scales' is the same key with this after it.
std::string grouped_size_key(const SampleSpec& spec) { return spec.layer + '\x1f' + operand_name(spec.operand); }
std::string scales_size_key(const std::string& size_key) { return size_key + "\x1fscales"; }

}  // namespace

Capture::Capture(ShipperLink& link, std::uint64_t staging_bytes)
    : link_(link), cu_(driver_api()), staging_bytes_(align_up(staging_bytes, kStagingAlign)) {
  if (link_.segment() == nullptr) return;
  writer_.emplace(link_.segment());
  // Detached and never destroyed: nothing at exit can race a destructor against it.
  std::thread([this] { publisher_loop(); }).detach();
}

bool Capture::device_ready() {
  if (device_ != Device::kUnset) return device_ == Device::kReady;
  device_ = Device::kFailed;
  if (!cu_.complete()) return false;
  if (cu_.ctx_get_current(&context_) != CUDA_SUCCESS || context_ == nullptr) {
    device_ = Device::kUnset;  // try again from a thread that has a context
    return false;
  }
  if (cu_.stream_create(&side_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      cu_.event_create(&side_done_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      cu_.mem_alloc(&staging_, staging_bytes_) != CUDA_SUCCESS) {
    std::fprintf(stderr, "fp8scope hook: cannot set up the device staging buffer (%llu bytes); sampling is off\n",
                 static_cast<unsigned long long>(staging_bytes_));
    return false;
  }
  // Pinned, the side stream's copies run asynchronously; unpinned they still work (the publisher
  // thread waits for them, never the training thread).
  cu_.mem_host_register(link_.segment(), link_.segment_bytes(), 0);
  device_ = Device::kReady;
  return true;
}

bool Capture::capturing(CUstream stream) {
  if (!cu_.complete()) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cu_.stream_is_capturing(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

std::optional<std::uint64_t> Capture::reserve_staging(std::uint64_t bytes) {
  bytes = align_up(bytes, kStagingAlign);
  std::uint64_t pos = staging_head_;
  if (pos % staging_bytes_ + bytes > staging_bytes_) pos += staging_bytes_ - pos % staging_bytes_;  // no wrap inside
  if (bytes > staging_bytes_ || pos + bytes - staging_tail_ > staging_bytes_) return std::nullopt;
  staging_head_ = pos + bytes;
  return pos;
}

shm::RecordHeader* Capture::reserve_record(std::uint64_t payload_bytes, std::uint64_t& end) {
  const std::uint64_t bytes = shm::round_up(sizeof(shm::RecordHeader) + payload_bytes);
  const std::optional<std::uint64_t> pos = writer_->reserve(bytes);
  if (!pos) return nullptr;
  shm::RecordHeader* r = writer_->at(*pos);
  std::memset(r, 0, sizeof *r);
  r->magic = shm::kMagic;
  r->record_bytes = bytes;
  r->payload_bytes = payload_bytes;
  end = *pos + bytes;
  return r;
}

void Capture::enqueue(std::unique_lock<std::mutex>& lock, const Pending& p) {
  if (p.copied == nullptr && pending_.empty() && in_flight_ == 0) {
    // Nothing to copy and nothing ahead of it: publish here rather than wake the publisher.
    writer_->publish(p.ring_end);
    lock.unlock();
    return;
  }
  pending_.push_back(p);
  const bool wake = publisher_idle_;
  publisher_idle_ = false;  // one wake is enough for whatever else queues before it runs
  lock.unlock();
  if (wake) work_.notify_one();
}

void Capture::fill_header(shm::RecordHeader& r, const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                          std::uint64_t payload) {
  r.kind = shm::RecordKind::kSample;
  r.step = spec.step;
  copy_text(r.name, sizeof r.name, spec.layer.c_str());
  copy_text(r.source_call, sizeof r.source_call, spec.source);
  r.gemm = static_cast<std::uint32_t>(spec.role);
  r.operand = static_cast<std::uint32_t>(spec.operand);
  r.dtype = static_cast<std::uint32_t>(v.dtype);
  r.scale_layout = static_cast<std::uint32_t>(v.scale_layout);
  r.scale_inv = 1.0f;
  r.gemm_alpha = alpha.host;
  r.k_is_outer = v.k_is_outer ? 1 : 0;
  r.scale_bytes = payload - static_cast<std::uint64_t>(v.batch_count) * v.matrix_bytes();
  r.expert = static_cast<std::int32_t>(spec.expert);
  r.experts = spec.experts;
  r.valid_rows = spec.valid_rows;
  r.ndim = v.batch_count > 1 ? 3 : 2;
  const std::int64_t outer = static_cast<std::int64_t>(v.outer()), inner = static_cast<std::int64_t>(v.inner());
  if (v.batch_count > 1) {
    r.shape[0] = v.batch_count;
    r.shape[1] = outer;
    r.shape[2] = inner;
  } else {
    r.shape[0] = outer;
    r.shape[1] = inner;
  }
  r.leading_dimension = v.ld;
}

bool Capture::enqueue_copies(Pending& p, const OperandView& v, const GemmAlpha& alpha, CUstream stream) {
  const shm::RecordHeader& r = *p.record;
  const std::uint64_t payload = p.device_bytes;  // the record's tokens follow, written on the host
  // Device to device on the caller's stream, packing the strided matrix (and each batch) densely,
  // then the scale tensor right after the codes.
  const std::uint64_t matrix_bytes = v.matrix_bytes();
  const auto bytes_of = [&](std::int64_t elements) { return static_cast<std::size_t>(elements * v.element_bits / 8); };
  bool ok = true;
  for (std::int32_t b = 0; ok && b < v.batch_count; ++b) {
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = reinterpret_cast<CUdeviceptr>(v.data) + static_cast<CUdeviceptr>(bytes_of(b * v.batch_stride));
    c.srcPitch = bytes_of(v.ld);
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = p.staged + b * matrix_bytes;
    c.dstPitch = bytes_of(static_cast<std::int64_t>(v.inner()));
    c.WidthInBytes = bytes_of(static_cast<std::int64_t>(v.inner()));
    c.Height = static_cast<std::size_t>(v.outer());
    ok = cu_.memcpy_2d_async(&c, stream) == CUDA_SUCCESS;
  }
  if (ok && r.scale_bytes != 0) {
    ok = cu_.memcpy_dtod_async(p.staged + static_cast<CUdeviceptr>(payload - r.scale_bytes),
                               reinterpret_cast<CUdeviceptr>(v.scales), r.scale_bytes, stream) == CUDA_SUCCESS;
  }
  // One aligned slot after the payload for the fp32 values that go into the record's header.
  const CUdeviceptr slot = p.staged + align_up(payload, kStagingAlign);
  if (ok && v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr) {
    p.staged_scale = slot;
    ok = cu_.memcpy_dtod_async(p.staged_scale, reinterpret_cast<CUdeviceptr>(v.scales), sizeof(float), stream) ==
         CUDA_SUCCESS;
  }
  if (ok && alpha.device != nullptr) {
    p.staged_alpha = slot + sizeof(float);
    ok = cu_.memcpy_dtod_async(p.staged_alpha, reinterpret_cast<CUdeviceptr>(alpha.device), sizeof(float), stream) ==
         CUDA_SUCCESS;
  }
  return ok && mark_copied(p, stream);
}

bool Capture::mark_copied(Pending& p, CUstream stream) {
  // The event that tells the publisher the copies ran: from the pool, or a new one.
  if (free_events_.empty()) {
    CUevent e = nullptr;
    if (cu_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
    free_events_.push_back(e);
  }
  if (cu_.event_record(free_events_.back(), stream) != CUDA_SUCCESS) return false;
  p.copied = free_events_.back();
  free_events_.pop_back();
  return true;
}

std::optional<shm::DropReason> Capture::context_problem() {
  if (!device_ready()) return device_ == Device::kUnset ? shm::DropReason::kNoContext : shm::DropReason::kCudaError;
  CUcontext current = nullptr;
  if (cu_.ctx_get_current(&current) != CUDA_SUCCESS || current != context_) return shm::DropReason::kNoContext;
  return std::nullopt;
}

std::optional<shm::DropReason> Capture::reserve(std::uint64_t staging, std::uint64_t payload, Pending& p) {
  if (staging > staging_bytes_ || shm::round_up(sizeof(shm::RecordHeader) + payload) > link_.segment()->data_bytes) {
    return shm::DropReason::kTooLarge;
  }
  const std::uint64_t staging_before = staging_head_;
  const std::optional<std::uint64_t> staged_at = reserve_staging(staging);
  if (!staged_at) return shm::DropReason::kStagingFull;
  p.record = reserve_record(payload, p.ring_end);
  if (p.record == nullptr) {
    staging_head_ = staging_before;  // the last reservation: undone
    return shm::DropReason::kRingFull;
  }
  p.staged = staging_ + *staged_at % staging_bytes_;
  p.staging_end = staging_head_;
  return std::nullopt;
}

std::optional<shm::DropReason> Capture::sample(const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                                               CUstream stream) {
  if (!writer_) return shm::DropReason::kRingFull;
  const std::uint64_t payload = v.payload_bytes();
  const std::uint64_t tokens_bytes = spec.tokens != nullptr ? 8 * spec.tokens->size() : 0;
  std::unique_lock<std::mutex> lock(mu_);
  if (const auto problem = context_problem()) return problem;
  // Staging: the payload, then one aligned slot for the fp32 values that go into the record's header.
  const bool scalar_scale = v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr;
  const bool header_slot = scalar_scale || alpha.device != nullptr;
  Pending p;
  if (const auto full = reserve(align_up(payload, kStagingAlign) + (header_slot ? kStagingAlign : 0),
                                payload + tokens_bytes, p)) {
    return full;
  }
  fill_header(*p.record, spec, v, alpha, payload);
  if (spec.tokens != nullptr) write_tokens(*p.record, payload, *spec.tokens);
  p.payload_bytes = payload + tokens_bytes;
  p.device_bytes = payload;
  return submit(lock, p, enqueue_copies(p, v, alpha, stream));
}

std::optional<shm::DropReason> Capture::submit(std::unique_lock<std::mutex>& lock, Pending& p, bool copies_enqueued) {
  if (!copies_enqueued) {
    // The reserved space is published as padding; the staging range is released with it.
    p.record->kind = shm::RecordKind::kPadding;
    p.copied = nullptr;
    device_ = Device::kFailed;
  }
  enqueue(lock, p);
  return copies_enqueued ? std::nullopt : std::optional<shm::DropReason>(shm::DropReason::kCudaError);
}

bool Capture::gather_ready() {
  if (gather_state_ != Gather::kUnset) return gather_state_ == Gather::kReady;
  gather_state_ = Gather::kFailed;
  // Once, on the first sampled batched or grouped GEMM: the driver JIT-compiles the PTX for this
  // context's device (and caches the result across runs).
  const CUresult loaded = cu_.module_load_data == nullptr ? CUDA_ERROR_NOT_SUPPORTED
                                                          : cu_.module_load_data(&gather_module_, kGatherKernelPtx);
  if (loaded != CUDA_SUCCESS || cu_.module_get_function(&gather_, gather_module_, "fp8scope_gather") != CUDA_SUCCESS ||
      cu_.module_get_function(&gather_scales_, gather_module_, "fp8scope_gather_scales") != CUDA_SUCCESS ||
      cu_.launch_kernel == nullptr) {
    std::fprintf(stderr,
                 "fp8scope hook: cannot load the gather kernel (CUDA error %d; the driver may be older than its PTX); "
                 "batched and grouped GEMMs are not sampled\n",
                 static_cast<int>(loaded));
    return false;
  }
  gather_state_ = Gather::kReady;
  return true;
}

bool Capture::launch_gather(const void* pointers, std::uint32_t index, const DeviceDims& dims, std::uint32_t groups,
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
  return cu_.launch_kernel(gather_, blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS;
}

bool Capture::launch_gather_scales(const OperandView& v, std::uint32_t index, const ExpertShape& shape, CUdeviceptr dst,
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
  return cu_.launch_kernel(gather_scales_, blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS;
}

bool Capture::stage_scalar(CUdeviceptr into, const void* scalar, const void* per_expert, std::uint32_t expert,
                           CUdeviceptr scratch, CUstream stream) {
  if (per_expert != nullptr) {
    return launch_gather(per_expert, expert, DeviceDims{}, 0, ExpertShape{1, 1, 1}, 32, into, sizeof(float), scratch,
                         stream);
  }
  return cu_.memcpy_dtod_async(into, reinterpret_cast<CUdeviceptr>(scalar), sizeof(float), stream) == CUDA_SUCCESS;
}

std::uint64_t Capture::grouped_capacity(const SampleSpec& spec, bool scales) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = grouped_sizes_.find(scales ? scales_size_key(grouped_size_key(spec)) : grouped_size_key(spec));
  // Unseen: a small share, so that a step sampling every expert of a layer for the first time
  // fits in the ring; an expert larger than that is counted too_large and sizes the next call.
  const std::uint64_t share =
      std::min(staging_bytes_, link_.segment()->data_bytes) / (scales ? kGroupedFirstScaleShare : kGroupedFirstShare);
  return it == grouped_sizes_.end() ? share
                                    : std::min(staging_bytes_ / 8, std::max<std::uint64_t>(it->second * kGroupedGrowth, 4096));
}

std::optional<shm::DropReason> Capture::sample_expert(const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                                                      const OperandView& activation, CUstream stream) {
  if (!writer_) return shm::DropReason::kRingFull;
  const bool device_shaped = v.device_dims.present();
  const auto expert = static_cast<std::uint32_t>(spec.expert);
  // The kernel copies rows-contiguous (column major) matrices; a row-major one is the same bytes
  // with rows and cols swapped.
  const ExpertShape host = v.shape_of(expert);
  const ExpertShape copied = v.row_major ? ExpertShape{host.cols, host.rows, host.ld} : host;
  const std::uint64_t codes = device_shaped ? grouped_capacity(spec) : copied.rows * v.element_bits / 8 * copied.cols;
  // Per-group block scales (grouped layouts only: read_expert_scales refuses them elsewhere).
  const bool block_scales = device_shaped && v.scales_per_expert && is_block_layout(v.scale_layout);
  const std::uint64_t scales = block_scales ? grouped_capacity(spec, true) : 0;
  const bool with_tokens = spec.tokens != nullptr || (device_shaped && activation.device_dims.present());
  const std::uint64_t tokens_bytes = with_tokens ? 8ull * spec.experts : 0;
  std::unique_lock<std::mutex> lock(mu_);
  if (const auto problem = context_problem()) return problem;
  if (!gather_ready()) return shm::DropReason::kGatherUnavailable;
  // Staging: the codes, the block scales, a header slot (scale, alpha, the scalar gathers'
  // scratch, the block scales' size), and for grouped layouts the two dims_out.
  const std::uint64_t dims = device_shaped ? dims_bytes(spec.experts) : 0;
  const std::uint64_t codes_staged = align_up(codes, kStagingAlign), scales_staged = align_up(scales, kStagingAlign);
  Pending p;
  if (const auto full = reserve(codes_staged + scales_staged + kStagingAlign + 2 * dims, codes + scales + tokens_bytes, p)) {
    return full;
  }
  fill_header(*p.record, spec, v, alpha, codes);
  shm::RecordHeader& r = *p.record;
  r.scale_bytes = 0;  // block scales: set once their size is known (settle_grouped)
  r.ndim = 2;
  r.shape[0] = static_cast<std::int64_t>(std::max<std::uint64_t>(copied.cols, 1));  // grouped: set when known
  r.shape[1] = static_cast<std::int64_t>(std::max<std::uint64_t>(copied.rows, 1));
  r.leading_dimension = host.ld;
  // The tokens follow the codes (and scales): a grouped sample's, where its sizes are known.
  if (spec.tokens != nullptr && !device_shaped) write_tokens(r, codes, *spec.tokens);
  if (spec.tokens != nullptr && device_shaped) p.tokens = *spec.tokens;
  p.payload_bytes = codes + tokens_bytes;
  p.device_bytes = codes;
  p.experts = spec.experts;
  p.element_bits = static_cast<std::uint32_t>(v.element_bits);
  p.tokens_in_cols = spec.tokens_in_b_cols;
  const CUdeviceptr slot = p.staged + codes_staged + scales_staged;
  if (device_shaped) {
    p.staged_dims = slot + kStagingAlign;
    if (with_tokens && spec.tokens == nullptr) p.staged_token_dims = p.staged_dims + dims;  // the device's count
    p.size_key = grouped_size_key(spec);
  }
  bool ok = launch_gather(v.data, expert, v.device_dims, spec.experts, copied, p.element_bits, p.staged, codes,
                          device_shaped ? p.staged_dims : slot + kSlotScaleScratch, stream);
  if (ok && block_scales) {
    p.staged_block_scales = p.staged + codes_staged;
    p.staged_scale_bytes = slot + kSlotScaleBytes;
    ok = launch_gather_scales(v, expert, copied, p.staged_block_scales, scales, p.staged_scale_bytes, stream);
  }
  if (ok && p.staged_token_dims != 0) {  // the activation's shapes only: nothing copied
    ok = launch_gather(activation.data, expert, activation.device_dims, spec.experts, ExpertShape{}, 8, p.staged, 0,
                       p.staged_token_dims, stream);
  }
  if (ok && v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr) {
    p.staged_scale = slot + kSlotScale;
    ok = stage_scalar(p.staged_scale, v.scales, v.scales_per_expert ? v.scales : nullptr, expert,
                      slot + kSlotScaleScratch, stream);
  }
  if (ok && (alpha.device != nullptr || alpha.per_expert != nullptr)) {
    p.staged_alpha = slot + kSlotAlpha;
    ok = stage_scalar(p.staged_alpha, alpha.device, alpha.per_expert, expert, slot + kSlotAlphaScratch, stream);
  }
  return submit(lock, p, ok && mark_copied(p, stream));
}

bool Capture::side_stream_synchronized() {
  return cu_.event_record(side_done_, side_stream_) == CUDA_SUCCESS && cu_.event_synchronize(side_done_) == CUDA_SUCCESS;
}

void Capture::learn_grouped_size(const std::string& key, std::uint64_t needed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (grouped_sizes_.size() >= 4096 && !grouped_sizes_.count(key)) grouped_sizes_.clear();
  std::uint64_t& largest = grouped_sizes_[key];
  largest = std::max(largest, needed);
}

bool Capture::settle_grouped(Pending& p) {
  std::vector<std::uint64_t> dims(4 + 2ull * p.experts), token_dims(p.staged_token_dims != 0 ? dims.size() : 0);
  std::uint64_t scale_bytes[2] = {0, 0};  // the block scales' size, and what was copied
  if (cu_.memcpy_dtoh_async(dims.data(), p.staged_dims, 8 * dims.size(), side_stream_) != CUDA_SUCCESS ||
      (p.staged_token_dims != 0 &&
       cu_.memcpy_dtoh_async(token_dims.data(), p.staged_token_dims, 8 * token_dims.size(), side_stream_) != CUDA_SUCCESS) ||
      (p.staged_scale_bytes != 0 &&
       cu_.memcpy_dtoh_async(scale_bytes, p.staged_scale_bytes, sizeof scale_bytes, side_stream_) != CUDA_SUCCESS) ||
      !side_stream_synchronized()) {
    return false;
  }
  shm::RecordHeader& r = *p.record;
  const std::uint64_t rows = dims[0], cols = dims[1], copied = dims[3];
  const std::uint64_t needed = rows * p.element_bits / 8 * cols;
  learn_grouped_size(p.size_key, needed);
  if (p.staged_scale_bytes != 0) learn_grouped_size(scales_size_key(p.size_key), scale_bytes[0]);
  const bool scales_missing = p.staged_scale_bytes != 0 && scale_bytes[1] == 0;
  if (copied == 0 || rows == 0 || cols == 0 || scales_missing) {
    r.kind = shm::RecordKind::kPadding;
    const bool empty = (rows == 0 || cols == 0) && dims[2] >= rows;  // an expert without tokens
    if (!empty) {
      const bool too_large = needed > p.device_bytes || (scales_missing && scale_bytes[0] != 0);
      shm::count_drop(link_.segment(), too_large ? shm::DropReason::kTooLarge : shm::DropReason::kUnsupportedLayout);
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
    p.tokens.resize(p.experts);
    for (std::uint32_t g = 0; g < p.experts; ++g) p.tokens[g] = token_dims[(p.tokens_in_cols ? 5 : 4) + 2 * g];
  }
  if (!p.tokens.empty()) {
    write_tokens(r, copied + r.scale_bytes, p.tokens);
    tokens_bytes = r.tokens_bytes;
  }
  r.payload_bytes = copied + r.scale_bytes + tokens_bytes;
  p.payload_bytes = r.payload_bytes;
  return true;
}

void Capture::step(std::uint64_t step) {
  if (!writer_) return;
  std::unique_lock<std::mutex> lock(mu_);
  Pending p;
  p.staging_end = staging_head_;
  p.record = reserve_record(0, p.ring_end);
  if (p.record == nullptr) return;  // the ring is full; the next step event says where we are
  p.record->kind = shm::RecordKind::kStep;
  p.record->step = step;
  enqueue(lock, p);
}

void Capture::scalar(const char* name, std::uint64_t step, double value) {
  if (!writer_) return;
  std::unique_lock<std::mutex> lock(mu_);
  Pending p;
  p.staging_end = staging_head_;
  p.record = reserve_record(0, p.ring_end);
  if (p.record == nullptr) {
    shm::count_drop(link_.segment(), shm::DropReason::kRingFull);
    return;
  }
  p.record->kind = shm::RecordKind::kScalar;
  p.record->step = step;
  copy_text(p.record->name, sizeof p.record->name, name);
  p.record->value = value;
  enqueue(lock, p);
}

void Capture::finish(Pending& p, bool can_copy) {
  if (p.copied != nullptr && can_copy && p.record->kind == shm::RecordKind::kSample) {
    auto header_value = [&](float* into, CUdeviceptr from) {
      return from == 0 || cu_.memcpy_dtoh_async(into, from, sizeof(float), side_stream_) == CUDA_SUCCESS;
    };
    bool ok = cu_.stream_wait_event(side_stream_, p.copied, 0) == CUDA_SUCCESS;
    // A grouped matrix: its shape first (settle_grouped may drop it, counted, as padding), then as
    // many bytes as it has.
    if (ok && p.staged_dims != 0) ok = settle_grouped(p);
    const bool wanted = p.record->kind == shm::RecordKind::kSample;
    // Block scales staged apart from the codes (a grouped matrix's) follow them in the record.
    const bool scales_apart = p.staged_block_scales != 0 && p.record->scale_bytes != 0;
    ok = ok && (!wanted || (cu_.memcpy_dtoh_async(p.record + 1, p.staged, p.device_bytes, side_stream_) == CUDA_SUCCESS &&
                            (!scales_apart ||
                             cu_.memcpy_dtoh_async(reinterpret_cast<std::byte*>(p.record + 1) + p.device_bytes,
                                                   p.staged_block_scales, p.record->scale_bytes,
                                                   side_stream_) == CUDA_SUCCESS) &&
                            header_value(&p.record->scale_inv, p.staged_scale) &&
                            header_value(&p.record->gemm_alpha, p.staged_alpha) && side_stream_synchronized()));
    shm::Header* h = link_.segment();
    if (!ok) {
      p.record->kind = shm::RecordKind::kPadding;
      shm::count_drop(h, shm::DropReason::kCudaError);
    } else if (wanted) {
      // The alpha is known now, copied or read: it tells a row-scaled NVFP4 GEMM.
      p.record->scale_layout = static_cast<std::uint32_t>(
          labelled_layout(static_cast<ScaleLayout>(p.record->scale_layout), static_cast<DType>(p.record->dtype),
                          static_cast<Operand>(p.record->operand), p.record->gemm_alpha));
      h->samples_published.fetch_add(1, std::memory_order_relaxed);
      h->bytes_published.fetch_add(p.payload_bytes, std::memory_order_relaxed);
    }
  }
  writer_->publish(p.ring_end);
}

void Capture::publisher_loop() {
  bool context_set = false;
  auto next_keep_alive = std::chrono::steady_clock::now();
  std::deque<Pending>& batch = batch_;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    publisher_idle_ = true;
    work_.wait_for(lock, kKeepAliveEvery, [&] { return stop_ || !pending_.empty(); });
    publisher_idle_ = false;
    if (!pending_.empty()) {
      // The whole queue at once: one lock round trip per batch, not per record, so the training
      // thread rarely finds the lock taken.
      batch.swap(pending_);
      in_flight_ = batch.size();
      const bool device_usable = device_ == Device::kReady;
      lock.unlock();
      for (Pending& p : batch) {
        if (p.copied != nullptr && !context_set) {
          context_set = device_usable && cu_.ctx_set_current(context_) == CUDA_SUCCESS;
        }
        if (p.copied != nullptr && !context_set) {  // cannot copy from this thread: drop, keep order
          p.record->kind = shm::RecordKind::kPadding;
          shm::count_drop(link_.segment(), shm::DropReason::kNoContext);
        }
        finish(p, context_set);
      }
      lock.lock();
      staging_tail_ = batch.back().staging_end;
      for (const Pending& p : batch) {
        if (p.copied != nullptr) free_events_.push_back(p.copied);
      }
      batch.clear();
      in_flight_ = 0;
      drained_.notify_all();
    }
    if (std::chrono::steady_clock::now() >= next_keep_alive) {
      lock.unlock();
      link_.keep_alive();
      lock.lock();
      next_keep_alive = std::chrono::steady_clock::now() + kKeepAliveEvery;
    }
  }
}

void Capture::drain(int grace_ms) {
  if (!writer_) return;
  std::unique_lock<std::mutex> lock(mu_);
  work_.notify_one();
  drained_.wait_for(lock, std::chrono::milliseconds(grace_ms), [&] { return pending_.empty() && in_flight_ == 0; });
  stop_ = true;
  work_.notify_one();
}

}  // namespace fp8scope::hook
