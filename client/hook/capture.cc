#include "fp8scope/hook/capture.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace fp8scope::hook {
namespace {

constexpr std::uint64_t kStagingAlign = 256;
constexpr auto kKeepAliveEvery = std::chrono::milliseconds(100);

std::uint64_t align_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }

void copy_text(char* dst, std::size_t size, const char* src) { std::snprintf(dst, size, "%s", src == nullptr ? "" : src); }

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
  const std::uint64_t payload = p.payload_bytes;
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

std::optional<shm::DropReason> Capture::sample(const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                                               CUstream stream) {
  if (!writer_) return shm::DropReason::kRingFull;
  const std::uint64_t payload = v.payload_bytes();
  std::unique_lock<std::mutex> lock(mu_);
  if (!device_ready()) return device_ == Device::kUnset ? shm::DropReason::kNoContext : shm::DropReason::kCudaError;
  CUcontext current = nullptr;
  if (cu_.ctx_get_current(&current) != CUDA_SUCCESS || current != context_) return shm::DropReason::kNoContext;
  // Staging: the payload, then one aligned slot for the fp32 values that go into the record's header.
  const bool scalar_scale = v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr;
  const bool header_slot = scalar_scale || alpha.device != nullptr;
  const std::uint64_t staging_need = align_up(payload, kStagingAlign) + (header_slot ? kStagingAlign : 0);
  if (staging_need > staging_bytes_ || shm::round_up(sizeof(shm::RecordHeader) + payload) > link_.segment()->data_bytes) {
    return shm::DropReason::kTooLarge;
  }
  const std::uint64_t staging_before = staging_head_;
  const std::optional<std::uint64_t> staged_at = reserve_staging(staging_need);
  if (!staged_at) return shm::DropReason::kStagingFull;
  Pending p;
  p.record = reserve_record(payload, p.ring_end);
  if (p.record == nullptr) {
    staging_head_ = staging_before;  // the last reservation: undone
    return shm::DropReason::kRingFull;
  }
  fill_header(*p.record, spec, v, alpha, payload);
  p.payload_bytes = payload;
  p.staged = staging_ + *staged_at % staging_bytes_;
  p.staging_end = staging_head_;
  if (!enqueue_copies(p, v, alpha, stream)) {
    // The reserved space is published as padding; the staging range is released with it.
    p.record->kind = shm::RecordKind::kPadding;
    p.copied = nullptr;
    device_ = Device::kFailed;
    enqueue(lock, p);
    return shm::DropReason::kCudaError;
  }
  enqueue(lock, p);
  return std::nullopt;
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
    const bool ok = cu_.stream_wait_event(side_stream_, p.copied, 0) == CUDA_SUCCESS &&
                    cu_.memcpy_dtoh_async(p.record + 1, p.staged, p.payload_bytes, side_stream_) == CUDA_SUCCESS &&
                    header_value(&p.record->scale_inv, p.staged_scale) &&
                    header_value(&p.record->gemm_alpha, p.staged_alpha) &&
                    cu_.event_record(side_done_, side_stream_) == CUDA_SUCCESS &&
                    cu_.event_synchronize(side_done_) == CUDA_SUCCESS;
    shm::Header* h = link_.segment();
    if (ok) {
      h->samples_published.fetch_add(1, std::memory_order_relaxed);
      h->bytes_published.fetch_add(p.payload_bytes, std::memory_order_relaxed);
    } else {
      p.record->kind = shm::RecordKind::kPadding;
      shm::count_drop(h, shm::DropReason::kCudaError);
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
