// Copies sampled operands out of the training process's GPU without blocking it (DESIGN.md): on
// the caller's stream, device to device into the hook's staging ring (stream order keeps the
// operand valid until the copy ran); then, on the hook's publisher thread, from a side stream into
// the shared ring, and publishes the record. Steps and scalars travel through the same ordered
// queue. The staging ring and the shared ring are hard limits: a sample that does not fit is
// dropped and counted, never waited for.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fp8scope/shm/shm_ring.h"
#include "fp8scope/hook/gemm_operands.h"
#include "fp8scope/hook/real_api.h"
#include "fp8scope/hook/shipper_link.h"

namespace fp8scope::hook {

struct SampleSpec {
  std::uint64_t step;
  const std::string& layer;
  GemmRole role;
  Operand operand;
  const char* source;
  // Mixture-of-experts GEMMs: the expert (-1: none), the call's experts, the tokens routed to each
  // (null: not known on the host), the rows of the sample holding tokens (0: all), and which of the
  // activation's dimensions counts the tokens when only the device knows it (tokens_in_b_cols).
  std::int64_t expert = -1;
  std::uint32_t experts = 0;
  const std::vector<std::uint64_t>* tokens = nullptr;
  std::uint64_t valid_rows = 0;
  bool tokens_in_b_cols = true;
};

class Capture {
 public:
  Capture(ShipperLink& link, std::uint64_t staging_bytes);

  // On the calling thread: stages one operand (codes and scales, and the GEMM's alpha when it
  // carries scales); the reason when it was dropped instead.
  std::optional<shm::DropReason> sample(const SampleSpec& spec, const OperandView& operand, const GemmAlpha& alpha,
                                        CUstream stream);
  // The same for expert spec.expert of a batched or grouped GEMM (operand.experts > 0), whose
  // matrix only the device can reach: copied by the gather kernel on the caller's stream. A grouped
  // layout's shape is learned there too (at most grouped_capacity() bytes are copied; more is a
  // drop), and the activation's (b's) shapes give the tokens per expert (spec.tokens_in_b_cols).
  std::optional<shm::DropReason> sample_expert(const SampleSpec& spec, const OperandView& operand,
                                               const GemmAlpha& alpha, const OperandView& activation, CUstream stream);
  // What sample_expert may copy for one matrix of a grouped layout (or, with `scales`, for its
  // block scales): the last size seen for it, with room to grow, or a share of the staging ring
  // the first time.
  std::uint64_t grouped_capacity(const SampleSpec& spec, bool scales = false);
  // True when `stream` is being captured into a CUDA graph (nothing may be enqueued on it then).
  bool capturing(CUstream stream);

  void step(std::uint64_t step);
  void scalar(const char* name, std::uint64_t step, double value);

  // At process exit: lets the publisher finish what is queued, for at most `grace_ms`.
  void drain(int grace_ms);

 private:
  struct Pending {
    std::uint64_t ring_end = 0;  // publish up to here
    shm::RecordHeader* record = nullptr;
    std::uint64_t payload_bytes = 0;
    CUevent copied = nullptr;  // null: nothing to copy from the device
    CUdeviceptr staged = 0;    // the payload: codes, then the scale tensor
    CUdeviceptr staged_scale = 0, staged_alpha = 0;  // one fp32 each, into the record's header
    std::uint64_t staging_end = 0;  // release the staging ring up to here
    std::uint64_t device_bytes = 0;  // what to copy from `staged` (the rest of the payload is written here)
    // Grouped layouts: the gather kernel's dims_out for the matrix and for the activation (whose
    // columns are the tokens per expert), read before the record is published.
    CUdeviceptr staged_dims = 0, staged_token_dims = 0;
    // A grouped matrix's block scales, staged after its codes' reservation, and their bytes_out.
    CUdeviceptr staged_block_scales = 0, staged_scale_bytes = 0;
    std::uint32_t experts = 0, element_bits = 0;
    bool tokens_in_cols = true;  // the activation's dims_out entry that counts each expert's tokens
    std::vector<std::uint64_t> tokens;  // a grouped sample's declared tokens, written once its sizes are known
    std::string size_key;  // grouped_sizes_'s key
  };

  bool device_ready();  // under mu_, on the calling thread
  bool gather_ready();  // the gather kernel, loaded on first use; under mu_
  // Under mu_: why the caller's thread cannot sample now (no device, not the hook's context).
  std::optional<shm::DropReason> context_problem();
  // Under mu_: `staging` bytes of staging and a ring record of `payload` bytes, both or neither
  // (p.record, ring_end, staged and staging_end set), or why not.
  std::optional<shm::DropReason> reserve(std::uint64_t staging, std::uint64_t payload, Pending& p);
  // Under mu_: queues p for the publisher; when its copies could not be enqueued, as padding (its
  // ring and staging space released with it), the device given up and kCudaError returned.
  std::optional<shm::DropReason> submit(std::unique_lock<std::mutex>& lock, Pending& p, bool copies_enqueued);
  static void fill_header(shm::RecordHeader& r, const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                          std::uint64_t payload);
  // The copies on the caller's stream and the event after them; false when a driver call failed.
  bool enqueue_copies(Pending& p, const OperandView& v, const GemmAlpha& alpha, CUstream stream);
  bool mark_copied(Pending& p, CUstream stream);
  // One fp32 (a scale or an alpha) into the header slot: from a device scalar, or the expert's entry
  // of a device array of pointers (the gather kernel).
  bool stage_scalar(CUdeviceptr into, const void* scalar, const void* per_expert, std::uint32_t expert,
                    CUdeviceptr scratch, CUstream stream);
  bool launch_gather(const void* pointers, std::uint32_t index, const DeviceDims& dims, std::uint32_t groups,
                     const ExpertShape& shape, std::uint32_t element_bits, CUdeviceptr dst, std::uint64_t capacity,
                     CUdeviceptr dims_out, CUstream stream);
  // One group's block scales (v.scales: a device array of pointers to them), sized on the device.
  bool launch_gather_scales(const OperandView& v, std::uint32_t index, const ExpertShape& shape, CUdeviceptr dst,
                            std::uint64_t capacity, CUdeviceptr bytes_out, CUstream stream);
  // A grouped sample's shape, codes and scales sizes and tokens from the gathers' outputs, on the
  // publisher thread. A matrix (or scale tensor) that did not fit or was malformed makes the record
  // padding (counted); an empty one (an expert without tokens) too, uncounted. False when a driver
  // call failed.
  bool settle_grouped(Pending& p);
  void learn_grouped_size(const std::string& key, std::uint64_t needed);  // takes mu_
  bool side_stream_synchronized();  // waits for what was queued on the side stream
  std::optional<std::uint64_t> reserve_staging(std::uint64_t bytes);
  shm::RecordHeader* reserve_record(std::uint64_t payload_bytes, std::uint64_t& end);
  // Queues a record for the publisher and releases `lock` (mu_), then wakes the publisher if it
  // sleeps: woken while the caller still held mu_, it would only block on it again (two more
  // syscalls and a context switch on the training thread's time).
  void enqueue(std::unique_lock<std::mutex>& lock, const Pending& p);
  void publisher_loop();
  // Copies a staged sample into its record (when `can_copy`) and publishes the record.
  void finish(Pending& p, bool can_copy);

  ShipperLink& link_;
  const DriverApi& cu_;
  std::uint64_t staging_bytes_;

  std::mutex mu_;
  std::condition_variable work_;     // the publisher waits here for records
  std::condition_variable drained_;  // drain() waits here for the queue to empty
  bool publisher_idle_ = false;      // wake the publisher only when it sleeps: a wake costs a syscall
  std::optional<shm::RingWriter> writer_;
  std::deque<Pending> pending_;
  // The publisher's working batch. A member, not a local of the thread: a forked child has no
  // publisher thread, and what only its stack held would look leaked there.
  std::deque<Pending> batch_;
  std::size_t in_flight_ = 0;  // taken from pending_ by the publisher, not yet published
  bool stop_ = false;
  enum class Device { kUnset, kReady, kFailed } device_ = Device::kUnset;
  CUcontext context_ = nullptr;
  CUstream side_stream_ = nullptr;
  CUevent side_done_ = nullptr;
  CUdeviceptr staging_ = 0;
  std::uint64_t staging_head_ = 0, staging_tail_ = 0;
  std::vector<CUevent> free_events_;
  enum class Gather { kUnset, kReady, kFailed } gather_state_ = Gather::kUnset;
  CUmodule gather_module_ = nullptr;  // kept for as long as gather_ may run: the process's life
  CUfunction gather_ = nullptr, gather_scales_ = nullptr;
  std::unordered_map<std::string, std::uint64_t> grouped_sizes_;  // largest bytes seen per grouped matrix (and scales)
};

}  // namespace fp8scope::hook
