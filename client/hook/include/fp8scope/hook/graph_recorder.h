// What the hook recorded into CUDA graphs (DESIGN.md "Graphs"). At capture, nothing runs: each GEMM
// operand the policy may ever sample, and each Transformer Engine cast, becomes a node of the
// graph, fp8scope_plan_copy (graph_plan.h), that copies it only when the replay's plan gives its
// slot a destination. The addresses a captured call reads are the graph's own, valid at every
// replay, so a recorded copy keeps them; its name, role, shape and scale mode are settled at
// capture. This keeps, per capture, what was recorded (a Recording), which graphs and instantiated
// graphs (execs) run it, and per exec the ordering its plan needs; the plan table is one device
// array of slots for every recording. Locked inside; Capture drives it.
//
// Lifetimes: a recording lives while a graph (the captured one or a clone) or an exec of it does;
// its slots are reused only once the last replay that could read them has finished (an event on
// that replay's stream). Two execs of one recording would read one plan (instantiated twice, or
// updated from another's graph), and a graph nested in another runs its copies unseen: neither is
// sampled while that lasts (counted graph_shared), never misread.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fp8scope/hook/cast_stash.h"
#include "fp8scope/hook/gemm_operands.h"
#include "fp8scope/hook/graph_plan.h"
#include "fp8scope/hook/real_api.h"

namespace fp8scope::hook {

// An expert's node of a batched or grouped GEMM (fp8scope_plan_gather): which expert it copies is
// each replay's choice, the `node`th of those the sampler picks for its GEMM.
struct RecordedGather {
  PlanGather plan;
  std::uint32_t experts = 0, node = 0;
  bool activation_device_shaped = false;  // the activation's shapes give the tokens (no declared ones)
  bool padded = false;                    // declared tokens count the valid rows of each expert
  bool tokens_in_b_cols = true;
};

// One GEMM operand recorded at capture, with what its sample record will say but the step (and,
// for an expert's node, the expert).
struct RecordedOperand {
  std::uint32_t slot = 0;
  std::size_t gemm = 0;  // its GEMM's place in the capture (Recording::signatures)
  std::string layer;
  GemmRole role = GemmRole::kUnknown;
  Operand operand = Operand::kX;
  const char* source = "";
  std::int64_t expert = -1;
  std::vector<std::uint64_t> tokens;  // declared for the layer, or (experts' nodes) counted on the host
  std::uint64_t valid_rows = 0;
  OperandView view;
  GemmAlpha alpha;
  // Its staging (as Capture::sample lays it out): the payload, a header slot, the cast's part.
  std::uint64_t payload = 0, staging = 0, before_cast = 0;
  std::uint64_t scale_at = 0, alpha_at = 0;  // in the header slot; 0: none
  std::optional<std::size_t> cast;           // Recording::casts
  bool columnwise = false;                   // the cast's column-wise copy
  std::uint64_t cast_bytes = 0;
  bool cast_uncovered = false;  // FP8/FP4 codes whose cast TE did not show us
  std::optional<RecordedGather> gather;
  std::uint64_t bytes() const { return payload + cast_bytes; }
};

// A Transformer Engine cast recorded at capture: its node copies the cast's part to its slot's
// destination, which the GEMMs reading its output copy it from.
struct RecordedCast {
  std::uint32_t slot = 0;
  StashedCast cast;  // outputs and record; `at`, ring positions and events unused
};

struct Recording {
  std::uint64_t capture_id = 0;
  bool ended = false;  // its capture ended well: its graph may be instantiated
  std::vector<RecordedOperand> operands;
  std::vector<RecordedCast> casts;
  std::unordered_map<const void*, std::size_t> cast_outputs;  // codes' pointer -> casts (the latest)
  std::vector<std::uint64_t> signatures;  // every GEMM of the capture, in order (the signature step clock)
  // Under the recorder's lock:
  int graphs = 0, execs = 0;
  bool nested = false, released = false;
  bool slots_lost = false;  // a replay's end could not be marked: its slots are never reused
  std::vector<std::uint32_t> slots;
  std::vector<CUevent> retire;  // after the last replay of each exec that ran it
  // Where the next sampled replay starts choosing, so a byte budget lets every operand in turn.
  mutable std::atomic<std::size_t> rotation{0};
};

// An exec's replays: ordered behind the clearing of the last sampled replay's plan, which ran on
// `cleared_on` (a replay on another stream waits for `cleared`).
struct ExecState {
  std::shared_ptr<Recording> recording;
  CUstream last_stream = nullptr;
  bool launched = false;
  CUstream cleared_on = nullptr;
  CUevent cleared = nullptr;
  bool clear_pending = false;
};

class GraphRecorder {
 public:
  explicit GraphRecorder(const DriverApi& cu) : cu_(cu) {}

  // The plan table, allocated on first use and zeroed through `side`; false when it cannot be.
  bool ensure_table(CUstream side);
  CUdeviceptr table() const { return table_; }

  // The recording of capture `id` (created when new), or null once its capture ended.
  std::shared_ptr<Recording> recording(std::uint64_t id, CUgraph graph);
  // A free slot of the table for `r`, or nothing when all are taken.
  std::optional<std::uint32_t> allocate_slot(Recording& r);
  // Capture `id` ended: into `graph` (null: it failed, and its recording goes).
  void capture_ended(std::uint64_t id, CUgraph graph);

  void instantiated(CUgraph graph, CUgraphExec exec);
  void updated(CUgraphExec exec, CUgraph graph);
  void exec_destroyed(CUgraphExec exec);
  void graph_destroyed(CUgraph graph);
  void cloned(CUgraph original, CUgraph clone);
  void nested(CUgraph child);
  // The recording an exec runs (null: none); `shared` when its replays may not be sampled.
  std::shared_ptr<const Recording> recording_of(CUgraphExec exec, bool& shared);
  bool any_recording() const { return recordings_.load(std::memory_order_relaxed) > 0; }

  // Around a replay of `exec` on `stream`: before, the stream waits for the last plan's clearing
  // when that ran on another stream; after, the exec remembers its stream, and with `cleared` (an
  // event recorded after this replay's plan was cleared) the clearing to wait for.
  bool before_replay(CUgraphExec exec, CUstream stream);
  void after_replay(CUgraphExec exec, CUstream stream, CUevent cleared);
  // An event for after_replay (pooled); null when none can be made.
  CUevent take_event();

 private:
  // Under mu_: a recording no graph or exec holds gives its slots back, once its replays finished.
  void release_if_unused(const std::shared_ptr<Recording>& r);
  void reclaim();  // under mu_: slots whose last replays finished become free
  // Under mu_: r's slots wait for what is queued on `stream` (an exec's last replay) before reuse.
  void retire_after(Recording& r, CUstream stream);
  CUevent event();

  const DriverApi& cu_;
  std::mutex mu_;
  CUdeviceptr table_ = 0;
  bool table_failed_ = false;
  std::uint32_t next_slot_ = 0;
  std::vector<std::uint32_t> free_slots_;
  struct Retired {
    std::vector<std::uint32_t> slots;
    std::vector<CUevent> events;
  };
  std::vector<Retired> retired_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Recording>> capturing_;  // by capture id
  std::unordered_map<CUgraph, std::shared_ptr<Recording>> graphs_;
  std::unordered_map<CUgraphExec, ExecState> execs_;
  std::vector<CUevent> free_events_;
  std::atomic<int> recordings_{0};  // alive: an exec without one need not be looked up
};

// The plan table's slots: 2^16 copies recorded at once, 512 KiB of device memory.
inline constexpr std::uint32_t kPlanSlots = 1u << 16;

}  // namespace fp8scope::hook
