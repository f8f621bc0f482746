#include "fp8scope/hook/capture.h"

#include <algorithm>
#include <cstdio>

namespace fp8scope::hook {

Capture::Capture(ShipperLink& link, std::uint64_t staging_bytes, std::uint64_t cast_stash_bytes)
    : link_(link),
      cu_(driver_api()),
      staging_(cu_, staging_bytes, link.segment(), link.segment_bytes()),
      stash_(cu_, cast_stash_bytes),
      kernels_(cu_),
      gather_(cu_, kernels_, staging_.bytes(), link.segment() != nullptr ? link.segment()->data_bytes : 0),
      graphs_(cu_) {
  if (link_.segment() == nullptr) return;
  writer_.emplace(link_.segment());
  publisher_.emplace(mu_, cu_, link_, *writer_, staging_, gather_, stash_);
  publisher_->start();
}

bool Capture::capturing(CUstream stream) {
  if (!cu_.complete()) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cu_.stream_is_capturing(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool Capture::enqueue_copies(PendingRecord& p, const OperandView& v, const GemmAlpha& alpha, CUstream stream) {
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
  const CUdeviceptr slot = p.staged + align_up(payload, DeviceStaging::kAlign);
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
  return ok && (p.copied = staging_.mark(stream)) != nullptr;
}

std::optional<shm::DropReason> Capture::reserve(std::uint64_t staging, std::uint64_t payload, PendingRecord& p) {
  if (staging > staging_.bytes() || shm::round_up(sizeof(shm::RecordHeader) + payload) > link_.segment()->data_bytes) {
    return shm::DropReason::kTooLarge;
  }
  const std::uint64_t staging_before = staging_.head();
  const std::optional<DeviceStaging::Range> staged = staging_.reserve(staging);
  if (!staged) return shm::DropReason::kStagingFull;
  p.record = reserve_record(*writer_, payload, p.ring_end);
  if (p.record == nullptr) {
    staging_.rewind(staging_before);  // the last reservation: undone
    return shm::DropReason::kRingFull;
  }
  p.staged = staged->at;
  p.staging_end = staged->end;
  return std::nullopt;
}

std::optional<shm::DropReason> Capture::sample(const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                                               CUstream stream) {
  if (!writer_) return shm::DropReason::kRingFull;
  const std::uint64_t payload = v.payload_bytes();
  const std::uint64_t tokens_bytes = spec.tokens != nullptr ? 8 * spec.tokens->size() : 0;
  std::unique_lock<std::mutex> lock(mu_);
  if (const auto problem = staging_.problem()) return problem;
  // The cast that wrote the operand, if the stash keeps it (one matrix, not an expert's).
  bool columnwise = false;
  const StashedCast* cast = spec.tokens == nullptr && v.batch_count == 1 ? stash_.find(v.data, columnwise) : nullptr;
  const std::uint64_t cast_bytes = cast != nullptr ? cast->record.bytes : 0;
  // Staging: the payload, then one aligned slot for the fp32 values that go into the record's
  // header, then the cast's part.
  const bool scalar_scale = v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr;
  const bool header_slot = scalar_scale || alpha.device != nullptr || cast != nullptr;
  const std::uint64_t before_cast = align_up(payload, DeviceStaging::kAlign) + (header_slot ? DeviceStaging::kAlign : 0);
  PendingRecord p;
  if (const auto full = reserve(before_cast + align_up(cast_bytes, DeviceStaging::kAlign),
                                payload + cast_bytes + tokens_bytes, p)) {
    return full;
  }
  fill_sample_header(*p.record, spec, v, alpha, payload);
  if (spec.tokens != nullptr) write_tokens(*p.record, payload, *spec.tokens);
  p.payload_bytes = payload + cast_bytes + tokens_bytes;
  p.device_bytes = payload;
  bool ok = enqueue_copies(p, v, alpha, stream);
  if (ok && cast != nullptr) {
    p.staged_cast = p.staged + before_cast;
    ok = enqueue_cast(p, *cast, columnwise, stream);
  }
  return submit(lock, p, ok);
}

bool Capture::enqueue_cast(PendingRecord& p, const StashedCast& cast, bool columnwise, CUstream stream) {
  shm::CastRecord& r = p.record->cast;
  r = cast.record;
  r.flags |= columnwise ? shm::kCastColumnwise : 0;
  r.flags |= columnwise && cast.columnwise_transposed ? shm::kCastTransposed : 0;
  p.cast_bytes = r.bytes;
  p.cast_id = cast.id;
  stash_.hold(cast.id);  // released by the publisher once the part is copied out
  // Enqueued after the operand's copies, whose event (p.copied) then covers this one too: the
  // event is recorded again behind it.
  if (cu_.memcpy_dtod_async(p.staged_cast, cast.at, r.bytes, stream) != CUDA_SUCCESS) return false;
  return cu_.event_record(p.copied, stream) == CUDA_SUCCESS;
}

std::uint64_t Capture::cast_bytes(const void* data) {
  std::lock_guard<std::mutex> lock(mu_);
  bool columnwise = false;
  const StashedCast* cast = stash_.find(data, columnwise);
  return cast != nullptr ? cast->record.bytes : 0;
}

std::optional<shm::DropReason> Capture::stash_cast(const CastToStash& c, CUstream stream) {
  if (!writer_) return shm::DropReason::kRingFull;
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto problem = staging_.problem()) return problem;
  stash_.step(c.cast.step);
  StashedCast cast = c.cast;
  for (int k = 0; k < kCastPartCount; ++k) {
    if (c.layout.bytes[k] != 0 && c.parts[k] == nullptr) return shm::DropReason::kCastUnreadable;
  }
  if (cast.record.bytes > stash_.bytes()) return shm::DropReason::kTooLarge;
  const std::optional<CUdeviceptr> at = stash_.reserve(cast.record.bytes, stream, cast.begin, cast.end);
  if (!at) return shm::DropReason::kCastStashFull;
  cast.at = *at;
  // Stream-ordered behind the cast: its scalars (current scaling's scale lives in a buffer freed
  // once the call returns), then its parts.
  bool ok = true;
  for (std::size_t i = 0; ok && i < std::size(c.scalars); ++i) {
    const CUdeviceptr from = c.scalars[i] != nullptr ? reinterpret_cast<CUdeviceptr>(c.scalars[i]) : stash_.zeros();
    ok = cu_.memcpy_dtod_async(cast.at + i * sizeof(float), from, sizeof(float), stream) == CUDA_SUCCESS;
  }
  for (int k = 0; ok && k < kCastPartCount; ++k) {
    if (c.layout.bytes[k] == 0) continue;
    ok = cu_.memcpy_dtod_async(cast.at + c.layout.offset[k], reinterpret_cast<CUdeviceptr>(c.parts[k]),
                               c.layout.bytes[k], stream) == CUDA_SUCCESS;
  }
  if (ok && stash_.add(cast, stream)) return std::nullopt;
  stash_.unreserve();
  return shm::DropReason::kCudaError;
}

std::optional<shm::DropReason> Capture::submit(std::unique_lock<std::mutex>& lock, PendingRecord& p,
                                               bool copies_enqueued) {
  if (!copies_enqueued) {
    // The reserved space is published as padding; the staging range is released with it.
    p.record->kind = shm::RecordKind::kPadding;
    p.copied = nullptr;
    staging_.give_up();
  }
  publisher_->enqueue(lock, p);
  return copies_enqueued ? std::nullopt : std::optional<shm::DropReason>(shm::DropReason::kCudaError);
}

std::uint64_t Capture::grouped_capacity(const SampleSpec& spec, bool scales) {
  return gather_.capacity(ExpertGather::size_key(spec.layer, spec.operand), scales);
}

Capture::ExpertLayout Capture::expert_layout(const SampleSpec& spec, const OperandView& v,
                                             bool activation_device_shaped) {
  ExpertLayout l;
  l.device_shaped = v.device_dims.present();
  // The kernel copies rows-contiguous (column major) matrices; a row-major one is the same bytes
  // with rows and cols swapped.
  const ExpertShape host = v.shape_of(static_cast<std::uint32_t>(spec.expert));
  l.copied = v.row_major ? ExpertShape{host.cols, host.rows, host.ld} : host;
  l.codes = l.device_shaped ? grouped_capacity(spec) : l.copied.rows * v.element_bits / 8 * l.copied.cols;
  // Per-group block scales (grouped layouts only: read_expert_scales refuses them elsewhere).
  l.block_scales = l.device_shaped && v.scales_per_expert && is_block_layout(v.scale_layout);
  l.scales = l.block_scales ? grouped_capacity(spec, true) : 0;
  l.with_tokens = spec.tokens != nullptr || (l.device_shaped && activation_device_shaped);
  l.tokens_bytes = l.with_tokens ? 8ull * spec.experts : 0;
  l.dims = l.device_shaped ? ExpertGather::dims_bytes(spec.experts) : 0;
  return l;
}

CUdeviceptr Capture::prepare_expert(PendingRecord& p, const SampleSpec& spec, const OperandView& v,
                                    const GemmAlpha& alpha, const ExpertLayout& l) {
  fill_sample_header(*p.record, spec, v, alpha, l.codes);
  shm::RecordHeader& r = *p.record;
  r.scale_bytes = 0;  // block scales: set once their size is known (ExpertGather::settle)
  r.ndim = 2;
  r.shape[0] = static_cast<std::int64_t>(std::max<std::uint64_t>(l.copied.cols, 1));  // grouped: set when known
  r.shape[1] = static_cast<std::int64_t>(std::max<std::uint64_t>(l.copied.rows, 1));
  r.leading_dimension = l.copied.ld;
  // The tokens follow the codes (and scales): a grouped sample's, where its sizes are known.
  if (spec.tokens != nullptr && !l.device_shaped) write_tokens(r, l.codes, *spec.tokens);
  p.payload_bytes = l.codes + l.tokens_bytes;
  p.device_bytes = l.codes;
  const CUdeviceptr slot = p.staged + l.codes_staged() + l.scales_staged();
  if (l.device_shaped) {
    GroupedParts& g = p.grouped.emplace();
    if (spec.tokens != nullptr) g.tokens = *spec.tokens;
    g.experts = spec.experts;
    g.element_bits = static_cast<std::uint32_t>(v.element_bits);
    g.tokens_in_cols = spec.tokens_in_b_cols;
    g.dims = slot + DeviceStaging::kAlign;
    if (l.with_tokens && spec.tokens == nullptr) g.token_dims = g.dims + l.dims;  // the device's count
    g.size_key = ExpertGather::size_key(spec.layer, spec.operand);
    if (l.block_scales) {
      g.block_scales = p.staged + l.codes_staged();
      g.scale_bytes = slot + ExpertGather::kSlotScaleBytes;
    }
  }
  if (v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr) p.staged_scale = slot + ExpertGather::kSlotScale;
  if (alpha.device != nullptr || alpha.per_expert != nullptr) p.staged_alpha = slot + ExpertGather::kSlotAlpha;
  return slot;
}

std::optional<shm::DropReason> Capture::sample_expert(const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                                                      const OperandView& activation, CUstream stream) {
  if (!writer_) return shm::DropReason::kRingFull;
  const auto expert = static_cast<std::uint32_t>(spec.expert);
  const ExpertLayout l = expert_layout(spec, v, activation.device_dims.present());
  std::unique_lock<std::mutex> lock(mu_);
  if (const auto problem = staging_.problem()) return problem;
  if (!gather_.ready()) return shm::DropReason::kGatherUnavailable;
  PendingRecord p;
  if (const auto full = reserve(l.staging(), l.payload(), p)) return full;
  const CUdeviceptr slot = prepare_expert(p, spec, v, alpha, l);
  bool ok = gather_.launch(v.data, expert, v.device_dims, spec.experts, l.copied, static_cast<std::uint32_t>(v.element_bits),
                           p.staged, l.codes, l.device_shaped ? p.grouped->dims : slot + ExpertGather::kSlotScaleScratch,
                           stream);
  if (ok && l.block_scales) {
    ok = gather_.launch_scales(v, expert, l.copied, p.grouped->block_scales, l.scales, p.grouped->scale_bytes, stream);
  }
  if (ok && l.device_shaped && p.grouped->token_dims != 0) {  // the activation's shapes only: nothing copied
    ok = gather_.launch(activation.data, expert, activation.device_dims, spec.experts, ExpertShape{}, 8, p.staged, 0,
                        p.grouped->token_dims, stream);
  }
  if (ok && p.staged_scale != 0) {
    ok = gather_.stage_scalar(p.staged_scale, v.scales, v.scales_per_expert ? v.scales : nullptr, expert,
                              slot + ExpertGather::kSlotScaleScratch, stream);
  }
  if (ok && p.staged_alpha != 0) {
    ok = gather_.stage_scalar(p.staged_alpha, alpha.device, alpha.per_expert, expert,
                              slot + ExpertGather::kSlotAlphaScratch, stream);
  }
  return submit(lock, p, ok && (p.copied = staging_.mark(stream)) != nullptr);
}

shm::RecordHeader* Capture::reserve_marker(PendingRecord& p) {
  p.staging_end = staging_.head();
  p.record = reserve_record(*writer_, 0, p.ring_end);
  return p.record;
}

void Capture::step(std::uint64_t step) {
  if (!writer_) return;
  std::unique_lock<std::mutex> lock(mu_);
  PendingRecord p;
  if (reserve_marker(p) == nullptr) return;  // the ring is full; the next step event says where we are
  p.record->kind = shm::RecordKind::kStep;
  p.record->step = step;
  publisher_->enqueue(lock, p);
}

void Capture::scalar(const char* name, std::uint64_t step, double value) {
  if (!writer_) return;
  std::unique_lock<std::mutex> lock(mu_);
  PendingRecord p;
  if (reserve_marker(p) == nullptr) {
    shm::count_drop(link_.segment(), shm::DropReason::kRingFull);
    return;
  }
  p.record->kind = shm::RecordKind::kScalar;
  p.record->step = step;
  std::snprintf(p.record->name, sizeof p.record->name, "%s", name);
  p.record->value = value;
  publisher_->enqueue(lock, p);
}

void Capture::drain(int grace_ms) {
  if (publisher_) publisher_->drain(grace_ms);
}

}  // namespace fp8scope::hook
