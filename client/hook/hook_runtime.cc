#include "fp8scope/hook/hook_runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "fp8scope/hook/graph_events.h"
#include "fp8scope/hook/layer_names.h"

namespace fp8scope::hook {
namespace {

constexpr std::uint64_t kDefaultRingBytes = 64ull << 20;
constexpr std::uint64_t kDefaultStagingBytes = 64ull << 20;
constexpr std::uint64_t kDefaultCastStashBytes = 64ull << 20;
constexpr std::int64_t kStepRecordEveryNs = 1'000'000'000;

std::uint64_t bytes_from_environment(const char* variable, std::uint64_t fallback) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value, &end, 10);
  if (*end != '\0' || v < (1u << 20)) {
    std::fprintf(stderr, "fp8scope hook: %s: expected a byte count of at least 1048576, got '%s'; using %llu\n",
                 variable, value, static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return v;
}

std::atomic<HookRuntime*> g_runtime{nullptr};
std::once_flag g_runtime_once;

// Registered when the runtime is created, which is after the CUDA runtime registered its own exit
// handler (a GEMM already ran): exit handlers run in reverse, so ours finishes its copies first.
// In a forked child the hook is already off, and our threads and locks are the parent's: touch
// nothing.
void shutdown_at_exit() {
  HookRuntime* r = g_runtime.load(std::memory_order_acquire);
  if (g_passthrough.exchange(true, std::memory_order_relaxed)) return;
  if (r != nullptr) r->shutdown();
}

// Whether an operand's tokens run along its rows (its outer dimension), so that rows past an
// expert's tokens are padding.
bool tokens_in_rows(const GemmCall& call, GemmRole role, const OperandView& view) {
  return tokens_run_outer(role, &view == &call.a, call.transa, call.transb, view.row_major);
}

}  // namespace

const std::string& configured_step_range() {
  static const std::string name = [] {
    const char* v = std::getenv("FP8SCOPE_STEP_RANGE");
    return std::string(v == nullptr ? "" : v);
  }();
  return name;
}

HookRuntime::HookRuntime()
    : step_range_(configured_step_range()),
      link_(bytes_from_environment("FP8SCOPE_RING_BYTES", kDefaultRingBytes), find_shipper()),
      sampler_(policy_from_environment()),
      capture_(link_, bytes_from_environment("FP8SCOPE_STAGING_BYTES", kDefaultStagingBytes),
               bytes_from_environment("FP8SCOPE_CAST_STASH_BYTES", kDefaultCastStashBytes)) {}

HookRuntime* HookRuntime::existing() {
  return g_passthrough.load(std::memory_order_relaxed) ? nullptr : g_runtime.load(std::memory_order_acquire);
}

HookRuntime* HookRuntime::get() {
  if (g_passthrough.load(std::memory_order_relaxed)) return nullptr;
  if (HookRuntime* r = g_runtime.load(std::memory_order_acquire)) return r;
  // FP8SCOPE_DISABLE=1 is read once, at load (hook_lifecycle.cc): it sets g_passthrough.
  std::call_once(g_runtime_once, [] {
    g_runtime.store(new HookRuntime, std::memory_order_release);  // immortal
    std::atexit(shutdown_at_exit);
  });
  return g_runtime.load(std::memory_order_acquire);
}

std::optional<PendingOutput> HookRuntime::observe_cublaslt(cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                                           cublasLtMatrixLayout_t Adesc, const void* B,
                                                           cublasLtMatrixLayout_t Bdesc, const void* D,
                                                           cublasLtMatrixLayout_t Ddesc, CUstream stream) {
  if (const std::optional<DriverApi::CaptureInfo> capture = captured(stream)) {
    const MatmulShape shape = read_matmul_shape(desc, Adesc);
    const std::uint64_t signature = gemm_signature(A, shape.a_rows, shape.a_cols, shape.transa, shape.transb);
    return observe_captured(*capture, signature, shape.transa, shape.transb, [&] {
      return read_cublaslt_call(shape, desc, alpha, A, Adesc, B, Bdesc, D, Ddesc, stream);
    });
  }
  // The shape is read once a call: for the step signature when steps come from it, else only
  // when the step is sampled.
  std::optional<MatmulShape> shape;
  std::uint64_t signature = 0;
  if (clock_.needs_signature()) {
    // A weight is read by fprop and dgrad alike: its layout flags keep their signatures apart.
    shape = read_matmul_shape(desc, Adesc);
    signature = gemm_signature(A, shape->a_rows, shape->a_cols, shape->transa, shape->transb);
  }
  const std::uint64_t step = clock_.on_gemm(signature);
  if (!sampler_.step_selected(link_.segment(), step)) return std::nullopt;
  if (!shape) shape = read_matmul_shape(desc, Adesc);
  const ReadResult read = read_cublaslt_call(*shape, desc, alpha, A, Adesc, B, Bdesc, D, Ddesc, stream);
  // The name is taken even for a GEMM that cannot be read, so the ordinals of the others hold.
  const GemmRole layout_role = read.call ? role_from_layout(read.call->transa, read.call->transb) : GemmRole::kUnknown;
  const GemmName name = thread_ranges().name_next_gemm(layout_role, step, read.call && read.call->experts > 0);
  bool conflict = false;
  const TensorSelection tensors = sampler_.select(step, name.layer, &conflict);
  if (conflict) count(shm::DropReason::kRuleConflict);
  if (tensors.none()) return std::nullopt;
  if (!read.call) {
    count(read.reason);
    return std::nullopt;
  }
  sample(*read.call, step, name, tensors);
  return output_of(*read.call, step, name, tensors);
}

std::optional<PendingOutput> HookRuntime::output_of(const GemmCall& call, std::uint64_t step, const GemmName& name,
                                                    TensorSelection tensors) {
  if (!tensors.takes(name.role, Operand::kOut)) return std::nullopt;
  if (!call.d) {
    count(call.d_reason);
    return std::nullopt;
  }
  return PendingOutput{step, name.layer, name.role, call.source, *call.d, call.stream, std::nullopt, 0};
}

void HookRuntime::sample_output(const PendingOutput& output) {
  const SampleSpec spec{output.step, output.layer, output.role, Operand::kOut, output.source};
  std::optional<shm::DropReason> dropped;
  if (output.capture) {
    dropped =
        capture_.record_operand(*output.capture, output.gemm, spec, output.view, GemmAlpha{}, false, output.stream);
  } else if (capture_.capturing(output.stream)) {  // nothing may be enqueued on a capturing stream
    dropped = shm::DropReason::kGraphCapture;
  } else if (!sampler_.charge(output.step, output.view.payload_bytes())) {
    dropped = shm::DropReason::kBudget;
  } else {
    dropped = capture_.sample(spec, output.view, GemmAlpha{}, output.stream);
  }
  if (dropped) count(*dropped);
}

template <class Read>
std::optional<PendingOutput> HookRuntime::observe_cublas_call(std::uint64_t signature, bool transa, bool transb,
                                                              bool grouped, cublasHandle_t handle, Read read_call) {
  const auto stream_of = [&] {
    cudaStream_t stream = nullptr;
    const auto get_stream = cublas_api().get_stream;
    return get_stream != nullptr && get_stream(handle, &stream) == CUBLAS_STATUS_SUCCESS ? stream : nullptr;
  };
  if (graph_events::any_capture()) {
    const CUstream stream = stream_of();
    if (const std::optional<DriverApi::CaptureInfo> capture = captured(stream)) {
      return observe_captured(*capture, signature, transa, transb, [&] { return read_call(stream); });
    }
  }
  const std::uint64_t step = clock_.on_gemm(signature);
  if (!sampler_.step_selected(link_.segment(), step)) return std::nullopt;
  const GemmName name = thread_ranges().name_next_gemm(role_from_layout(transa, transb), step, grouped);
  bool conflict = false;
  const TensorSelection tensors = sampler_.select(step, name.layer, &conflict);
  if (conflict) count(shm::DropReason::kRuleConflict);
  if (tensors.none()) return std::nullopt;
  const ReadResult read = read_call(stream_of());
  if (!read.call) {
    count(read.reason);
    return std::nullopt;
  }
  sample(*read.call, step, name, tensors);
  return output_of(*read.call, step, name, tensors);
}

std::optional<PendingOutput> HookRuntime::observe_cublas(const char* source, cublasOperation_t transa,
                                                         cublasOperation_t transb, int m, int n, int k, const void* A,
                                                         cudaDataType Atype, int lda, long long strideA, const void* B,
                                                         cudaDataType Btype, int ldb, long long strideB,
                                                         const CublasOutput& C, int batch_count, cublasHandle_t handle) {
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const std::uint64_t signature =
      clock_.needs_signature()
          ? gemm_signature(A, static_cast<std::uint64_t>(ta ? k : m), static_cast<std::uint64_t>(ta ? m : k), ta, tb)
          : 0;
  return observe_cublas_call(signature, ta, tb, false, handle, [&](CUstream stream) {
    return read_cublas_call(source, ta, tb, m, n, k, A, Atype, lda, strideA, B, Btype, ldb, strideB, C, batch_count,
                            stream);
  });
}

void HookRuntime::observe_cublas_batched(const char* source, cublasOperation_t transa, cublasOperation_t transb,
                                         std::int64_t m, std::int64_t n, std::int64_t k, const void* Aarray,
                                         cudaDataType Atype, std::int64_t lda, const void* Barray, cudaDataType Btype,
                                         std::int64_t ldb, std::int64_t batch_count, cublasHandle_t handle) {
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const std::uint64_t signature =
      clock_.needs_signature()
          ? gemm_signature(Aarray, static_cast<std::uint64_t>(ta ? k : m), static_cast<std::uint64_t>(ta ? m : k), ta, tb)
          : 0;
  observe_cublas_call(signature, ta, tb, true, handle, [&](CUstream stream) {
    return read_cublas_batched_call(source, ta, tb, m, n, k, Aarray, Atype, lda, Barray, Btype, ldb, batch_count, stream);
  });
}

void HookRuntime::observe_cublas_grouped(const char* source, const std::optional<GroupedProblems>& problems,
                                         const void* Aarray, cudaDataType Atype, const void* Barray, cudaDataType Btype,
                                         cublasHandle_t handle) {
  // The arrays are the host's (cuBLAS documents them so), so the step signature reads group 0.
  const bool ta = problems && problems->transa[0], tb = problems && problems->transb[0];
  const std::uint64_t signature =
      clock_.needs_signature() && problems
          ? gemm_signature(Aarray, static_cast<std::uint64_t>(problems->m[0]), static_cast<std::uint64_t>(problems->k[0]), ta, tb)
          : 0;
  observe_cublas_call(signature, ta, tb, true, handle, [&](CUstream stream) {
    if (!problems) return ReadResult{std::nullopt, shm::DropReason::kUnreadableBatch};
    return read_cublas_grouped_call(source, *problems, Aarray, Atype, Barray, Btype, stream);
  });
}

SampleSpec HookRuntime::operand_spec(const GemmCall& call, std::uint64_t step, const GemmName& name,
                                     const OperandView& view, Operand kind) {
  // A GEMM named for its expert (a range or the C API) carries the layer's declared tokens.
  SampleSpec spec{step, name.layer, name.role, kind, call.source};
  spec.expert = name.expert;
  if (name.expert >= 0 && !name.declared_tokens.empty()) {
    spec.experts = static_cast<std::uint32_t>(name.declared_tokens.size());
    spec.tokens = &name.declared_tokens;
    spec.valid_rows =
        tokens_in_rows(call, name.role, view) ? valid_rows(name.declared_tokens, kind, name.expert, view.outer()) : 0;
  }
  return spec;
}

std::optional<DriverApi::CaptureInfo> HookRuntime::captured(CUstream stream) {
  if (!graph_events::any_capture()) return std::nullopt;
  return capture_.capture_of(stream);
}

template <class Read>
std::optional<PendingOutput> HookRuntime::observe_captured(const DriverApi::CaptureInfo& capture,
                                                           std::uint64_t signature, bool transa, bool transb, Read read) {
  // Nothing runs now: the GEMM's place in the capture (for the step clock at replay), and a copy
  // node for each operand the policy may ever sample. Its name counts GEMMs from the capture's
  // start, as a step's do.
  const std::size_t gemm = capture_.record_gemm(capture, signature);
  const ReadResult read_result = read();
  const bool grouped = read_result.call && read_result.call->experts > 0;
  const GemmName name = thread_ranges().name_next_gemm(role_from_layout(transa, transb), ~capture.id, grouped);
  bool conflict = false;
  const TensorSelection tensors = sampler_.selectable(name.layer, &conflict);
  if (conflict) count(shm::DropReason::kRuleConflict);
  if (tensors.none()) return std::nullopt;
  if (!read_result.call) {
    count(read_result.reason);
    return std::nullopt;
  }
  const GemmCall& call = *read_result.call;
  if (grouped) record_experts(capture, gemm, call, name, tensors);
  std::optional<PendingOutput> output = output_of(call, 0, name, tensors);
  if (output) {
    output->capture = capture;
    output->gemm = gemm;
  }
  if (grouped) return output;
  const bool te = te_casts_seen_.load(std::memory_order_relaxed);
  for (const auto& [view, kind] : {std::pair<const OperandView&, Operand>{call.a, operand_of_a(name.role)},
                                   std::pair<const OperandView&, Operand>{call.b, operand_of_b(name.role)}}) {
    if (!tensors.takes(name.role, kind)) continue;
    const SampleSpec spec = operand_spec(call, 0, name, view, kind);
    if (const auto dropped = capture_.record_operand(capture, gemm, spec, view, call.alpha, te, call.stream)) {
      count(*dropped);
    }
  }
  return output;
}

void HookRuntime::record_experts(const DriverApi::CaptureInfo& capture, std::size_t gemm, const GemmCall& call,
                                 const GemmName& name, TensorSelection tensors) {
  // As sample_experts reads a call, once for every replay: which experts a node copies is the
  // replay's choice, so each operand gets as many nodes as the sampler picks experts a call.
  const bool declared = name.declared_tokens.size() == call.experts;
  const std::vector<std::uint64_t> counted = host_tokens(call, name.role);
  const std::vector<std::uint64_t>* tokens = declared ? &name.declared_tokens : counted.empty() ? nullptr : &counted;
  const std::uint32_t nodes = sampler_.experts_per_call(call.experts);
  for (const auto& [view, kind] : {std::pair<const OperandView&, Operand>{call.a, operand_of_a(name.role)},
                                   std::pair<const OperandView&, Operand>{call.b, operand_of_b(name.role)}}) {
    if (!tensors.takes(name.role, kind)) continue;
    SampleSpec spec{0, name.layer, name.role, kind, call.source};
    spec.experts = call.experts;
    spec.tokens = tokens;
    spec.tokens_in_b_cols = tokens_in_b_cols(name.role, call.transb);
    // Declared tokens count the rows of each expert that are not padding.
    const bool padded = declared && tokens_in_rows(call, name.role, view);
    if (const auto dropped =
            capture_.record_expert(capture, gemm, spec, view, call.alpha, call.b, padded, nodes, call.stream)) {
      count(*dropped);
    }
  }
}

CUresult HookRuntime::graph_launch(CUgraphExec exec, CUstream stream, GraphLaunch real) {
  GraphRecorder& graphs = capture_.graphs();
  if (!graphs.any_recording()) return real();
  bool shared = false;
  const std::shared_ptr<const Recording> r = graphs.recording_of(exec, shared);
  if (r == nullptr) return real();
  // The step of each recorded GEMM: the clock's, or with steps found from signatures, the clock fed
  // the capture's GEMMs in order, as if they had run here.
  std::vector<std::uint64_t> steps;
  if (clock_.needs_signature()) {
    steps.reserve(r->signatures.size());
    for (const std::uint64_t signature : r->signatures) steps.push_back(clock_.on_gemm(signature));
  }
  const std::uint64_t now = clock_.current();
  const auto step_of = [&](const RecordedOperand& op) { return op.gemm < steps.size() ? steps[op.gemm] : now; };
  std::vector<Capture::Chosen> chosen;
  bool any_step = false;
  for (const RecordedOperand& op : r->operands) any_step = any_step || sampler_.step_selected(link_.segment(), step_of(op));
  // The experts each recorded GEMM's nodes copy at this replay, picked as for an eager call.
  std::unordered_map<std::size_t, std::vector<std::uint32_t>> experts_of;
  const auto expert_of = [&](const RecordedOperand& op) -> std::optional<std::uint32_t> {
    auto it = experts_of.find(op.gemm);
    if (it == experts_of.end()) {
      it = experts_of.emplace(op.gemm, sampler_.experts_for_call(op.layer, op.gather->experts)).first;
    }
    if (op.gather->node >= it->second.size()) return std::nullopt;
    return it->second[op.gather->node];
  };
  if (any_step) {
    // From where the budget stopped last time, so every operand is seen in turn.
    const std::size_t n = r->operands.size(), start = r->rotation.load(std::memory_order_relaxed) % n;
    std::optional<std::size_t> first_skipped;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (start + k) % n;
      const RecordedOperand& op = r->operands[i];
      const std::uint64_t step = step_of(op);
      if (!sampler_.step_selected(link_.segment(), step) || !sampler_.select(step, op.layer).takes(op.role, op.operand)) {
        continue;
      }
      const std::optional<std::uint32_t> expert = op.gather ? expert_of(op) : 0;
      if (!expert) continue;
      const std::uint64_t bytes = capture_.replay_bytes(op, *expert);
      if (bytes == 0) continue;  // an expert without tokens: nothing to copy
      if (!sampler_.charge(step, bytes)) {
        count(shm::DropReason::kBudget);
        if (!first_skipped) first_skipped = i;
        continue;
      }
      if (op.cast_uncovered) count(shm::DropReason::kCastUncovered);
      chosen.push_back({i, step, *expert});
    }
    if (first_skipped) r->rotation.store(*first_skipped, std::memory_order_relaxed);
  }
  // A replay inside another capture would leave its plan in that graph; one sharing its copies
  // with another exec would have them written twice.
  if (!chosen.empty() && (shared || captured(stream))) {
    count(shm::DropReason::kGraphShared, chosen.size());
    chosen.clear();
  }
  std::vector<shm::DropReason> dropped;
  const CUresult result = capture_.replay(exec, *r, chosen, stream, real, dropped);
  for (const shm::DropReason reason : dropped) count(reason);
  return result;
}

void HookRuntime::sample(const GemmCall& call, std::uint64_t step, const GemmName& name, TensorSelection tensors) {
  if (call.experts > 0) return sample_experts(call, step, name, tensors);
  struct Part {
    const OperandView& view;
    Operand kind;
  };
  const Part parts[] = {{call.a, operand_of_a(name.role)}, {call.b, operand_of_b(name.role)}};
  bool checked_capture = false;
  for (const Part& part : parts) {
    if (!tensors.takes(name.role, part.kind)) continue;
    if (!checked_capture) {
      checked_capture = true;
      if (capture_.capturing(call.stream)) {  // nothing may be enqueued on a capturing stream
        count(shm::DropReason::kGraphCapture);
        return;
      }
    }
    // An FP8 or FP4 operand carries the cast that wrote it, when TE's was seen.
    const std::uint64_t cast_bytes = capture_.cast_bytes(part.view.data);
    if (!sampler_.charge(step, part.view.payload_bytes() + cast_bytes)) {
      count(shm::DropReason::kBudget);
      continue;
    }
    if (cast_bytes == 0 && dtype_is_codes(part.view.dtype) && te_casts_seen_.load(std::memory_order_relaxed)) {
      count(shm::DropReason::kCastUncovered);
    }
    const SampleSpec spec = operand_spec(call, step, name, part.view, part.kind);
    if (const std::optional<shm::DropReason> dropped = capture_.sample(spec, part.view, call.alpha, call.stream)) {
      count(*dropped);
    }
  }
}

void HookRuntime::sample_experts(const GemmCall& call, std::uint64_t step, const GemmName& name,
                                 TensorSelection tensors) {
  if (capture_.capturing(call.stream)) {
    count(shm::DropReason::kGraphCapture);
    return;
  }
  struct Part {
    const OperandView& view;
    Operand kind;
  };
  const Part parts[] = {{call.a, operand_of_a(name.role)}, {call.b, operand_of_b(name.role)}};
  // Declared tokens, when they cover every expert of the call, say how many rows of each
  // activation are tokens; else the host's own count (or, for grouped layouts, the device's).
  const bool declared = name.declared_tokens.size() == call.experts;
  const std::vector<std::uint64_t> counted = host_tokens(call, name.role);
  const std::vector<std::uint64_t>* tokens = declared ? &name.declared_tokens : counted.empty() ? nullptr : &counted;
  for (const std::uint32_t expert : sampler_.experts_for_call(name.layer, call.experts)) {
    for (const Part& part : parts) {
      if (!tensors.takes(name.role, part.kind)) continue;
      SampleSpec spec{step, name.layer, name.role, part.kind, call.source};
      spec.expert = expert;
      spec.experts = call.experts;
      spec.tokens = tokens;
      spec.tokens_in_b_cols = tokens_in_b_cols(name.role, call.transb);
      const ExpertShape shape = part.view.shape_of(expert);
      const std::uint64_t rows = part.view.row_major ? shape.rows : shape.cols, inner = part.view.row_major ? shape.cols : shape.rows;
      const bool device_shaped = part.view.device_dims.present();
      if (!device_shaped && rows * inner == 0) continue;  // an expert without tokens: nothing to copy
      // A grouped layout's rows are the device's: the daemon holds valid_rows to them. Tokens that
      // run along the contiguous dimension (wgrad's transposed copies) have no padding rows.
      const bool padded = declared && tokens_in_rows(call, name.role, part.view);
      spec.valid_rows = padded ? valid_rows(name.declared_tokens, part.kind, expert, device_shaped ? ~0ull : rows) : 0;
      const bool block_scales = part.view.scales_per_expert && is_block_layout(part.view.scale_layout);
      const std::uint64_t bytes = device_shaped ? capture_.grouped_capacity(spec) +
                                                      (block_scales ? capture_.grouped_capacity(spec, true) : 0)
                                                : rows * inner * part.view.element_bits / 8;
      if (!sampler_.charge(step, bytes)) {
        count(shm::DropReason::kBudget);
        continue;
      }
      if (const std::optional<shm::DropReason> dropped =
              capture_.sample_expert(spec, part.view, call.alpha, call.b, call.stream)) {
        count(*dropped);
      }
    }
  }
}

void HookRuntime::step(std::uint64_t step) {
  clock_.set_from_api(step);
  // The daemon hears of sampled steps, and of the others at most once a second: a record per step
  // would cost every step of a fast loop a trip through the ring and the network.
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch()).count();
  if (sampler_.step_selected(link_.segment(), step) ||
      now - last_step_record_ns_.load(std::memory_order_relaxed) >= kStepRecordEveryNs) {
    last_step_record_ns_.store(now, std::memory_order_relaxed);
    capture_.step(step);
  }
}

void HookRuntime::scalar(const char* name, std::uint64_t step, double value) { capture_.scalar(name, step, value); }

void HookRuntime::shutdown() { capture_.drain(1000); }

}  // namespace fp8scope::hook
