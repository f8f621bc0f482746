#include "fp8scope/hook/publisher.h"

#include <chrono>
#include <thread>

#include "fp8scope/hook/row_scaled_gemm.h"

namespace fp8scope::hook {
namespace {

constexpr auto kKeepAliveEvery = std::chrono::milliseconds(100);

}  // namespace

Publisher::Publisher(std::mutex& mu, const DriverApi& cu, ShipperLink& link, shm::RingWriter& writer,
                     DeviceStaging& staging, ExpertGather& gather, CastStash& stash)
    : mu_(mu), cu_(cu), link_(link), writer_(writer), staging_(staging), gather_(gather), stash_(stash) {}

void Publisher::start() {
  std::thread([this] { loop(); }).detach();
}

void Publisher::enqueue(std::unique_lock<std::mutex>& lock, const PendingRecord& p) {
  if (p.copied == nullptr && pending_.empty() && in_flight_ == 0) {
    // Nothing to copy and nothing ahead of it: publish here rather than wake the thread.
    writer_.publish(p.ring_end);
    lock.unlock();
    return;
  }
  pending_.push_back(p);
  unlock_and_wake(lock);
}

void Publisher::enqueue(std::unique_lock<std::mutex>& lock, const std::vector<PendingRecord>& records) {
  pending_.insert(pending_.end(), records.begin(), records.end());
  unlock_and_wake(lock);
}

void Publisher::unlock_and_wake(std::unique_lock<std::mutex>& lock) {
  const bool wake = idle_;
  idle_ = false;  // one wake is enough for whatever else queues before it runs
  lock.unlock();
  if (wake) work_.notify_one();
}

void Publisher::finish(PendingRecord& p, bool can_copy) {
  shm::RecordHeader* r = p.record;
  if (p.copied != nullptr && can_copy && r->kind == shm::RecordKind::kSample) {
    auto header_value = [&](float* into, CUdeviceptr from) {
      return from == 0 || cu_.memcpy_dtoh_async(into, from, sizeof(float), staging_.side()) == CUDA_SUCCESS;
    };
    bool ok = cu_.stream_wait_event(staging_.side(), p.copied, 0) == CUDA_SUCCESS;
    // A grouped matrix: its shape first (settle may drop it, counted, as padding), then as many
    // bytes as it has.
    if (ok && p.grouped) ok = gather_.settle(p, staging_, link_.segment());
    const bool wanted = r->kind == shm::RecordKind::kSample;
    // Block scales staged apart from the codes (a grouped matrix's) follow them in the record.
    const bool scales_apart = p.grouped && p.grouped->block_scales != 0 && r->scale_bytes != 0;
    ok = ok && (!wanted || (cu_.memcpy_dtoh_async(r + 1, p.staged, p.device_bytes, staging_.side()) == CUDA_SUCCESS &&
                            (!scales_apart ||
                             cu_.memcpy_dtoh_async(reinterpret_cast<std::byte*>(r + 1) + p.device_bytes,
                                                   p.grouped->block_scales, r->scale_bytes, staging_.side()) == CUDA_SUCCESS) &&
                            (p.cast_bytes == 0 ||
                             cu_.memcpy_dtoh_async(reinterpret_cast<std::byte*>(r + 1) + p.device_bytes, p.staged_cast,
                                                   p.cast_bytes, staging_.side()) == CUDA_SUCCESS) &&
                            header_value(&r->scale_inv, p.staged_scale) && header_value(&r->gemm_alpha, p.staged_alpha) &&
                            staging_.side_synchronized()));
    shm::Header* h = link_.segment();
    if (!ok) {
      r->kind = shm::RecordKind::kPadding;
      shm::count_drop(h, shm::DropReason::kCudaError);
    } else if (wanted) {
      // The alpha is known now, copied or read: it tells a row-scaled NVFP4 GEMM.
      r->scale_layout = static_cast<std::uint32_t>(labelled_layout(static_cast<ScaleLayout>(r->scale_layout),
                                                                   static_cast<DType>(r->dtype),
                                                                   static_cast<Operand>(r->operand), r->gemm_alpha));
      h->samples_published.fetch_add(1, std::memory_order_relaxed);
      h->bytes_published.fetch_add(p.payload_bytes, std::memory_order_relaxed);
    }
  }
  writer_.publish(p.ring_end);
}

void Publisher::loop() {
  // This thread's waits and copies must not break a capture a training thread runs in global
  // mode (real_api.h, RelaxedCaptureMode): relaxed for the thread's life.
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (cu_.exchange_capture_mode != nullptr) cu_.exchange_capture_mode(&relaxed);
  bool context_set = false;
  auto next_keep_alive = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    idle_ = true;
    work_.wait_for(lock, kKeepAliveEvery, [&] { return stop_ || !pending_.empty(); });
    idle_ = false;
    if (!pending_.empty()) {
      // The whole queue at once: one lock round trip per batch, not per record, so the training
      // thread rarely finds the lock taken.
      batch_.swap(pending_);
      in_flight_ = batch_.size();
      const bool device_usable = staging_.usable();
      lock.unlock();
      for (PendingRecord& p : batch_) {
        if (p.copied != nullptr && !context_set) context_set = device_usable && staging_.enter_context();
        if (p.copied != nullptr && !context_set) {  // cannot copy from this thread: drop, keep order
          p.record->kind = shm::RecordKind::kPadding;
          shm::count_drop(link_.segment(), shm::DropReason::kNoContext);
        }
        finish(p, context_set);
      }
      lock.lock();
      staging_.release(batch_.back().staging_end);
      for (const PendingRecord& p : batch_) {
        if (p.copied != nullptr) staging_.recycle(p.copied);
        if (p.cast_id != 0) stash_.release(p.cast_id);
      }
      batch_.clear();
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

void Publisher::drain(int grace_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  work_.notify_one();
  drained_.wait_for(lock, std::chrono::milliseconds(grace_ms), [&] { return pending_.empty() && in_flight_ == 0; });
  stop_ = true;
  work_.notify_one();
}

}  // namespace fp8scope::hook
