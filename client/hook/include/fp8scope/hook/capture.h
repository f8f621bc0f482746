// Copies sampled operands out of the training process's GPU without blocking it (DESIGN.md): on
// the caller's stream, device to device into the hook's staging ring (device_staging.h); then, on
// the publisher thread (publisher.h), from a side stream into the shared ring, and publishes the
// record. Steps and scalars travel through the same ordered queue. The staging ring and the shared
// ring are hard limits: a sample that does not fit is dropped and counted, never waited for.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "fp8scope/hook/cast_stash.h"
#include "fp8scope/hook/device_staging.h"
#include "fp8scope/hook/expert_gather.h"
#include "fp8scope/hook/gemm_operands.h"
#include "fp8scope/hook/graph_events.h"
#include "fp8scope/hook/graph_recorder.h"
#include "fp8scope/hook/hook_kernels.h"
#include "fp8scope/hook/publisher.h"
#include "fp8scope/hook/real_api.h"
#include "fp8scope/hook/sample_records.h"
#include "fp8scope/hook/shipper_link.h"
#include "fp8scope/vocabulary/cast_capture.h"

namespace fp8scope::hook {

// What a Transformer Engine cast leaves for the GEMM that reads its output: where its parts and
// the scalars it used are on the device, and what its record will say.
struct CastToStash {
  StashedCast cast;                              // outputs, layout of the copies, record, step
  const void* parts[kCastPartCount] = {};         // device pointers of the parts cast_layout() places
  const void* scalars[4] = {};                    // fp32 on the device: CastScalars' fields in order; null: 0
  CastLayout layout;
};

class Capture {
 public:
  Capture(ShipperLink& link, std::uint64_t staging_bytes, std::uint64_t cast_stash_bytes);

  // On the calling thread, after TE's cast returned: copies its input and scalars into the cast
  // stash on its stream; the reason when it was dropped instead.
  std::optional<shm::DropReason> stash_cast(const CastToStash& c, CUstream stream);
  // What a GEMM operand at `data` adds to its record for its cast (0: no cast of it is kept).
  std::uint64_t cast_bytes(const void* data);

  // On the calling thread: stages one operand (codes and scales, and the GEMM's alpha when it
  // carries scales, and the cast that wrote it when the stash keeps one); the reason when it was
  // dropped instead.
  std::optional<shm::DropReason> sample(const SampleSpec& spec, const OperandView& operand, const GemmAlpha& alpha,
                                        CUstream stream);
  // The same for expert spec.expert of a batched or grouped GEMM (operand.experts > 0), whose
  // matrix only the device can reach: copied by the gather kernel on the caller's stream. A grouped
  // layout's shape is learned there too (at most grouped_capacity() bytes are copied; more is a
  // drop), and the activation's (b's) shapes give the tokens per expert (spec.tokens_in_b_cols).
  std::optional<shm::DropReason> sample_expert(const SampleSpec& spec, const OperandView& operand,
                                               const GemmAlpha& alpha, const OperandView& activation, CUstream stream);
  // What sample_expert may copy for one matrix of a grouped layout (or, with `scales`, for its
  // block scales): see ExpertGather::capacity.
  std::uint64_t grouped_capacity(const SampleSpec& spec, bool scales = false);
  // True when `stream` is being captured into a CUDA graph (nothing may be enqueued on it then).
  bool capturing(CUstream stream);

  // CUDA graphs (graph_recorder.h). At capture, on the capturing thread: the capture `stream` is
  // in; a GEMM of it (its place in the capture returned); a node for one of its operands, or for a
  // cast of Transformer Engine's, recorded after the capture's earlier work; the reason when it
  // was dropped instead. Set-up the capture mode forbids runs in relaxed mode, never failing it.
  std::optional<DriverApi::CaptureInfo> capture_of(CUstream stream) const { return cu_.capture_of(stream); }
  std::size_t record_gemm(const DriverApi::CaptureInfo& capture, std::uint64_t signature);
  std::optional<shm::DropReason> record_operand(const DriverApi::CaptureInfo& capture, std::size_t gemm,
                                                const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                                                bool te_casts_seen, CUstream stream);
  // The same for the experts of a batched or grouped GEMM: `nodes` fp8scope_plan_gather nodes for
  // operand v, each copying the expert a replay chooses for it, as sample_expert would (`padded`:
  // spec's tokens count each expert's rows that are not padding).
  std::optional<shm::DropReason> record_expert(const DriverApi::CaptureInfo& capture, std::size_t gemm,
                                               const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                                               const OperandView& activation, bool padded, std::uint32_t nodes,
                                               CUstream stream);
  // What a replay's copy of recorded operand `op` (of `expert`, for an expert's node) charges to the
  // step's budget; 0 for an expert whose matrix the host knows is empty.
  std::uint64_t replay_bytes(const RecordedOperand& op, std::uint32_t expert);
  std::optional<shm::DropReason> record_cast(const DriverApi::CaptureInfo& capture, const CastToStash& c,
                                             CUstream stream);
  GraphRecorder& graphs() { return graphs_; }

  // A replay of `exec` (running recording `r`) that samples `chosen`, each operand with its step:
  // their records reserved, the plan written on `stream`, `launch` (the real graph launch) called,
  // the plan cleared and the records queued behind the replay. Returns launch's result; a chosen
  // operand that could not be sampled is in `dropped`.
  struct Chosen {
    std::size_t operand;
    std::uint64_t step;
    std::uint32_t expert = 0;  // an expert's node's
  };
  CUresult replay(CUgraphExec exec, const Recording& r, const std::vector<Chosen>& chosen, CUstream stream,
                  GraphLaunch launch, std::vector<shm::DropReason>& dropped);

  void step(std::uint64_t step);
  void scalar(const char* name, std::uint64_t step, double value);

  // At process exit: lets the publisher finish what is queued, for at most `grace_ms`.
  void drain(int grace_ms);

 private:
  // Under mu_: `staging` bytes of staging and a ring record of `payload` bytes, both or neither
  // (p.record, ring_end, staged and staging_end set), or why not.
  std::optional<shm::DropReason> reserve(std::uint64_t staging, std::uint64_t payload, PendingRecord& p);
  // Under mu_: queues p for the publisher; when its copies could not be enqueued, as padding (its
  // ring and staging space released with it), the device given up and kCudaError returned.
  std::optional<shm::DropReason> submit(std::unique_lock<std::mutex>& lock, PendingRecord& p, bool copies_enqueued);
  // The copies on the caller's stream and the event after them; false when a driver call failed.
  bool enqueue_copies(PendingRecord& p, const OperandView& v, const GemmAlpha& alpha, CUstream stream);
  // Under mu_: the cast of operand v (p's record) into the record, and its part's copy enqueued.
  bool enqueue_cast(PendingRecord& p, const StashedCast& cast, bool columnwise, CUstream stream);
  // Where an expert's sample lies in its staging, for sample_expert and a replay's gather alike
  // (ExpertGather, fp8scope_plan_gather): the codes, the block scales, a header slot (ExpertGather's
  // kSlot*) and a grouped layout's two dims_out.
  struct ExpertLayout {
    bool device_shaped = false, block_scales = false, with_tokens = false;
    ExpertShape copied;  // the shape the host knows, column major
    std::uint64_t codes = 0, scales = 0, tokens_bytes = 0, dims = 0;
    std::uint64_t codes_staged() const { return align_up(codes, DeviceStaging::kAlign); }
    std::uint64_t scales_staged() const { return align_up(scales, DeviceStaging::kAlign); }
    std::uint64_t staging() const { return codes_staged() + scales_staged() + DeviceStaging::kAlign + 2 * dims; }
    std::uint64_t payload() const { return codes + scales + tokens_bytes; }
  };
  ExpertLayout expert_layout(const SampleSpec& spec, const OperandView& v, bool activation_device_shaped);
  // Under mu_: the header and grouped parts of p (reserved for `l`) for expert spec.expert of v;
  // returns its header slot.
  CUdeviceptr prepare_expert(PendingRecord& p, const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                             const ExpertLayout& l);
  // Under mu_: a record of no payload (a step or a scalar) queued behind the samples before it.
  shm::RecordHeader* reserve_marker(PendingRecord& p);
  // Under mu_, at capture: the staging, the kernels and the plan table, set up in relaxed capture
  // mode; the reason when they cannot be.
  std::optional<shm::DropReason> graph_set_up();
  // A sampled replay's plan: a destination per slot, and where each recorded cast's part goes
  // (into the first record that reads it).
  struct ReplayPlan {
    std::vector<std::pair<std::uint32_t, PlanSlot>> entries;
    std::vector<std::pair<std::size_t, CUdeviceptr>> cast_parts;  // by Recording::casts index
  };
  // Under mu_: the record of chosen operand c reserved and filled as its eager sample would be, its
  // slots in `plan`; or why it is dropped.
  std::optional<shm::DropReason> replay_record(const Recording& r, const Chosen& c, PendingRecord& p, ReplayPlan& plan);
  // ... for an expert's node, its record laid out as sample_expert lays it out.
  std::optional<shm::DropReason> replay_expert(const RecordedOperand& op, const Chosen& c, PendingRecord& p,
                                               ReplayPlan& plan);
  // The plan entries written (or cleared) on `stream` before (after) a replay.
  bool write_plan(const std::vector<std::pair<std::uint32_t, PlanSlot>>& entries, bool clear, CUstream stream);

  ShipperLink& link_;
  const DriverApi& cu_;
  std::mutex mu_;  // the training threads' reservations, and the publisher's queue
  std::optional<shm::RingWriter> writer_;
  DeviceStaging staging_;
  CastStash stash_;
  HookKernels kernels_;
  ExpertGather gather_;
  GraphRecorder graphs_;
  std::optional<Publisher> publisher_;
};

}  // namespace fp8scope::hook
