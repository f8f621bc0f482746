// Capture's side of CUDA graphs (graph_recorder.h): the copy nodes recorded at capture, and the
// plan, records and ordering of a sampled replay.
#include <algorithm>

#include "fp8scope/hook/capture.h"
#include "fp8scope/kernels/scale_layout.h"

namespace fp8scope::hook {
namespace {

PlanSegment direct(const void* src, std::uint64_t offset, std::uint64_t bytes) {
  PlanSegment s{};
  s.src = reinterpret_cast<unsigned long long>(src);
  s.offset = offset;
  s.rows = 1;
  s.width = bytes;
  s.pitch = bytes;
  s.batches = 1;
  s.from_slot = kPlanDirect;
  s.zeros = src == nullptr ? 1 : 0;
  return s;
}

// What a recorded operand of GEMM `gemm` says of itself, from its spec, view and alpha.
RecordedOperand recorded(std::size_t gemm, const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha) {
  RecordedOperand op;
  op.gemm = gemm;
  op.layer = spec.layer;
  op.role = spec.role;
  op.operand = spec.operand;
  op.source = spec.source;
  op.expert = spec.expert;
  if (spec.tokens != nullptr) op.tokens = *spec.tokens;
  op.valid_rows = spec.valid_rows;
  op.view = v;
  op.alpha = alpha;
  return op;
}

// A plan slot that copies to `dst`.
PlanSlot to(CUdeviceptr dst) {
  PlanSlot s{};
  s.dst = dst;
  return s;
}

}  // namespace

std::optional<shm::DropReason> Capture::graph_set_up() {
  if (!writer_) return shm::DropReason::kRingFull;
  if (const auto problem = staging_.problem()) return problem;
  if (!kernels_.ready()) return shm::DropReason::kGatherUnavailable;
  if (!graphs_.ensure_table(staging_.side())) return shm::DropReason::kCudaError;
  return std::nullopt;
}

std::size_t Capture::record_gemm(const DriverApi::CaptureInfo& capture, std::uint64_t signature) {
  const std::shared_ptr<Recording> r = graphs_.recording(capture.id, capture.graph);
  r->signatures.push_back(signature);
  return r->signatures.size() - 1;
}

std::optional<shm::DropReason> Capture::record_operand(const DriverApi::CaptureInfo& capture, std::size_t gemm,
                                                       const SampleSpec& spec, const OperandView& v,
                                                       const GemmAlpha& alpha, bool te_casts_seen, CUstream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto problem = graph_set_up()) return problem;
  const std::shared_ptr<Recording> r = graphs_.recording(capture.id, capture.graph);
  RecordedOperand op = recorded(gemm, spec, v, alpha);
  op.payload = v.payload_bytes();
  // The cast that wrote the operand, recorded earlier in this capture (one matrix, not an expert's).
  if (spec.tokens == nullptr && v.batch_count == 1) {
    if (const auto it = r->cast_outputs.find(v.data); it != r->cast_outputs.end()) {
      op.cast = it->second;
      op.columnwise = r->casts[it->second].cast.columnwise == v.data;
      op.cast_bytes = r->casts[it->second].cast.record.bytes;
    }
  }
  op.cast_uncovered = !op.cast && dtype_is_codes(v.dtype) && te_casts_seen;
  // Staging as Capture::sample lays it out: the payload, a header slot, the cast's part.
  const bool scalar_scale = v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr;
  const bool header_slot = scalar_scale || alpha.device != nullptr || op.cast;
  const std::uint64_t slot_at = align_up(op.payload, DeviceStaging::kAlign);
  op.before_cast = slot_at + (header_slot ? DeviceStaging::kAlign : 0);
  op.staging = op.before_cast + align_up(op.cast_bytes, DeviceStaging::kAlign);
  if (op.staging > staging_.bytes()) return shm::DropReason::kTooLarge;

  PlanCopy copy{};
  const auto bytes_of = [&](std::int64_t elements) { return static_cast<std::uint64_t>(elements * v.element_bits / 8); };
  PlanSegment& codes = copy.segment[copy.count++];
  codes = direct(v.data, 0, bytes_of(static_cast<std::int64_t>(v.inner())));
  codes.rows = v.outer();
  codes.pitch = bytes_of(v.ld);
  codes.batches = static_cast<unsigned long long>(v.batch_count);
  codes.batch_pitch = bytes_of(v.batch_stride);
  const std::uint64_t scale_bytes = op.payload - static_cast<std::uint64_t>(v.batch_count) * v.matrix_bytes();
  if (scale_bytes != 0) copy.segment[copy.count++] = direct(v.scales, op.payload - scale_bytes, scale_bytes);
  if (scalar_scale) {
    op.scale_at = slot_at;
    copy.segment[copy.count++] = direct(v.scales, slot_at, sizeof(float));
  }
  if (alpha.device != nullptr) {
    op.alpha_at = slot_at + sizeof(float);
    copy.segment[copy.count++] = direct(alpha.device, op.alpha_at, sizeof(float));
  }
  if (op.cast) {
    // From wherever this replay's plan put the cast's part (another record's, or this one's).
    PlanSegment& part = copy.segment[copy.count++];
    part = direct(nullptr, op.before_cast, op.cast_bytes);
    part.zeros = 0;
    part.from_slot = r->casts[*op.cast].slot;
  }
  const std::optional<std::uint32_t> slot = graphs_.allocate_slot(*r);
  if (!slot) return shm::DropReason::kGraphTableFull;
  op.slot = *slot;
  if (!kernels_.plan_copy(graphs_.table(), op.slot, copy, op.bytes(), stream)) return shm::DropReason::kCudaError;
  r->operands.push_back(std::move(op));
  return std::nullopt;
}

std::optional<shm::DropReason> Capture::record_expert(const DriverApi::CaptureInfo& capture, std::size_t gemm,
                                                      const SampleSpec& spec, const OperandView& v,
                                                      const GemmAlpha& alpha, const OperandView& activation,
                                                      bool padded, std::uint32_t nodes, CUstream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto problem = graph_set_up()) return problem;
  const std::shared_ptr<Recording> r = graphs_.recording(capture.id, capture.graph);
  constexpr unsigned long long kNone = ~0ull;
  const auto address = [](const void* p) { return reinterpret_cast<unsigned long long>(p); };
  RecordedGather g;
  g.experts = spec.experts;
  g.activation_device_shaped = activation.device_dims.present();
  g.tokens_in_b_cols = spec.tokens_in_b_cols;
  g.padded = padded;
  // What fp8scope_plan_gather copies, as sample_expert's launches copy it (ExpertLayout).
  PlanGather& k = g.plan;
  const bool device_shaped = v.device_dims.present();
  k.pointers = address(v.data);
  if (device_shaped) {
    k.rows_array = address(v.device_dims.rows);
    k.cols_array = address(v.device_dims.cols);
    k.ld_array = address(v.device_dims.ld);
    k.widths = (v.device_dims.rows_cols_64 ? 1u : 0u) | (v.device_dims.ld_64 ? 2u : 0u);
  }
  k.groups = spec.experts;
  k.element_bits = static_cast<unsigned int>(v.element_bits);
  k.k_is_outer = v.k_is_outer ? 1u : 0u;
  k.align = DeviceStaging::kAlign;
  k.dims_at = device_shaped ? DeviceStaging::kAlign : ExpertGather::kSlotScaleScratch;
  k.scale_bytes_at = ExpertGather::kSlotScaleBytes;
  if (device_shaped && v.scales_per_expert && is_block_layout(v.scale_layout)) {
    k.scales = address(v.scales);
    k.geometry = scale_geometry(v.scale_layout);
  }
  k.token_dims_at = kNone;
  if (device_shaped && g.activation_device_shaped && spec.tokens == nullptr) {
    k.token_pointers = address(activation.data);
    k.token_rows_array = address(activation.device_dims.rows);
    k.token_cols_array = address(activation.device_dims.cols);
    k.token_ld_array = address(activation.device_dims.ld);
    k.token_widths = (activation.device_dims.rows_cols_64 ? 1u : 0u) | (activation.device_dims.ld_64 ? 2u : 0u);
    k.token_dims_at = DeviceStaging::kAlign + ExpertGather::dims_bytes(spec.experts);
  }
  k.scale_at = k.alpha_at = kNone;
  if (v.scale_layout == ScaleLayout::kTensorScalar && v.scales != nullptr) {
    k.scale = address(v.scales);
    k.scale_per_expert = v.scales_per_expert ? 1u : 0u;
    k.scale_at = ExpertGather::kSlotScale;
  }
  if (alpha.device != nullptr || alpha.per_expert != nullptr) {
    k.alpha = address(alpha.per_expert != nullptr ? alpha.per_expert : alpha.device);
    k.alpha_per_expert = alpha.per_expert != nullptr ? 1u : 0u;
    k.alpha_at = ExpertGather::kSlotAlpha;
  }
  // The grid for the most one expert's matrix may copy now (it grows with the tokens).
  SampleSpec first = spec;
  first.expert = 0;
  const std::uint64_t bytes = expert_layout(first, v, g.activation_device_shaped).codes;
  for (std::uint32_t node = 0; node < nodes; ++node) {
    RecordedOperand op = recorded(gemm, spec, v, alpha);  // its expert: each replay's choice
    op.gather = g;
    op.gather->node = node;
    const std::optional<std::uint32_t> slot = graphs_.allocate_slot(*r);
    if (!slot) return shm::DropReason::kGraphTableFull;
    op.slot = *slot;
    if (!kernels_.plan_gather(graphs_.table(), op.slot, k, bytes, stream)) return shm::DropReason::kCudaError;
    r->operands.push_back(std::move(op));
  }
  return std::nullopt;
}

std::uint64_t Capture::replay_bytes(const RecordedOperand& op, std::uint32_t expert) {
  if (!op.gather) return op.bytes();
  const std::string& layer = op.layer;
  SampleSpec spec{0, layer, op.role, op.operand, op.source};
  spec.expert = expert;
  spec.experts = op.gather->experts;
  spec.tokens = op.tokens.empty() ? nullptr : &op.tokens;
  const ExpertLayout l = expert_layout(spec, op.view, op.gather->activation_device_shaped);
  return l.device_shaped || l.copied.rows * l.copied.cols != 0 ? l.codes + l.scales : 0;
}

std::optional<shm::DropReason> Capture::record_cast(const DriverApi::CaptureInfo& capture, const CastToStash& c,
                                                    CUstream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto problem = graph_set_up()) return problem;
  for (int k = 0; k < kCastPartCount; ++k) {
    if (c.layout.bytes[k] != 0 && c.parts[k] == nullptr) return shm::DropReason::kCastUnreadable;
  }
  if (c.cast.record.bytes > staging_.bytes()) return shm::DropReason::kTooLarge;
  const std::shared_ptr<Recording> r = graphs_.recording(capture.id, capture.graph);
  // Its scalars (a missing one is 0), then its parts, as the cast stash lays them out.
  PlanCopy copy{};
  for (std::size_t i = 0; i < std::size(c.scalars); ++i) {
    copy.segment[copy.count++] = direct(c.scalars[i], i * sizeof(float), sizeof(float));
  }
  for (int k = 0; k < kCastPartCount; ++k) {
    if (c.layout.bytes[k] != 0) copy.segment[copy.count++] = direct(c.parts[k], c.layout.offset[k], c.layout.bytes[k]);
  }
  const std::optional<std::uint32_t> slot = graphs_.allocate_slot(*r);
  if (!slot) return shm::DropReason::kGraphTableFull;
  if (!kernels_.plan_copy(graphs_.table(), *slot, copy, c.cast.record.bytes, stream)) return shm::DropReason::kCudaError;
  // A later cast into the same output replaces this one for the GEMMs after it.
  r->casts.push_back(RecordedCast{*slot, c.cast});
  for (const void* output : {c.cast.rowwise, c.cast.columnwise}) {
    if (output != nullptr) r->cast_outputs[output] = r->casts.size() - 1;
  }
  return std::nullopt;
}

bool Capture::write_plan(const std::vector<std::pair<std::uint32_t, PlanSlot>>& entries, bool clear, CUstream stream) {
  for (std::size_t at = 0; at < entries.size(); at += kPlanEntries) {
    PlanEntries e{};
    for (std::size_t i = at; i < entries.size() && e.count < kPlanEntries; ++i, ++e.count) {
      e.slot[e.count] = entries[i].first;
      e.value[e.count] = clear ? PlanSlot{} : entries[i].second;
    }
    if (!kernels_.plan_set(graphs_.table(), e, stream)) return false;
  }
  return true;
}

std::optional<shm::DropReason> Capture::replay_record(const Recording& r, const Chosen& c, PendingRecord& p,
                                                      ReplayPlan& plan) {
  const RecordedOperand& op = r.operands[c.operand];
  if (op.gather) return replay_expert(op, c, p, plan);
  const std::uint64_t tokens_bytes = 8 * op.tokens.size();
  if (const auto full = reserve(op.staging, op.payload + op.cast_bytes + tokens_bytes, p)) return full;
  SampleSpec spec{c.step, op.layer, op.role, op.operand, op.source};
  spec.expert = op.expert;
  if (!op.tokens.empty()) {
    spec.experts = static_cast<std::uint32_t>(op.tokens.size());
    spec.tokens = &op.tokens;
  }
  spec.valid_rows = op.valid_rows;
  fill_sample_header(*p.record, spec, op.view, op.alpha, op.payload);
  if (spec.tokens != nullptr) write_tokens(*p.record, op.payload, op.tokens);
  p.payload_bytes = op.payload + op.cast_bytes + tokens_bytes;
  p.device_bytes = op.payload;
  p.staged_scale = op.scale_at != 0 ? p.staged + op.scale_at : 0;
  p.staged_alpha = op.alpha_at != 0 ? p.staged + op.alpha_at : 0;
  if (op.cast) {
    const RecordedCast& cast = r.casts[*op.cast];
    shm::CastRecord& cr = p.record->cast;
    cr = cast.cast.record;
    cr.flags |= op.columnwise ? shm::kCastColumnwise : 0;
    cr.flags |= op.columnwise && cast.cast.columnwise_transposed ? shm::kCastTransposed : 0;
    p.cast_bytes = cr.bytes;
    p.staged_cast = p.staged + op.before_cast;
    const bool placed =
        std::any_of(plan.cast_parts.begin(), plan.cast_parts.end(), [&](const auto& e) { return e.first == *op.cast; });
    if (!placed) {
      plan.cast_parts.emplace_back(*op.cast, p.staged_cast);
      plan.entries.emplace_back(cast.slot, to(p.staged_cast));
    }
  }
  plan.entries.emplace_back(op.slot, to(p.staged));
  return std::nullopt;
}

std::optional<shm::DropReason> Capture::replay_expert(const RecordedOperand& op, const Chosen& c, PendingRecord& p,
                                                      ReplayPlan& plan) {
  const RecordedGather& g = *op.gather;
  SampleSpec spec{c.step, op.layer, op.role, op.operand, op.source};
  spec.expert = c.expert;
  spec.experts = g.experts;
  spec.tokens = op.tokens.empty() ? nullptr : &op.tokens;
  spec.tokens_in_b_cols = g.tokens_in_b_cols;
  const ExpertLayout l = expert_layout(spec, op.view, g.activation_device_shaped);
  // The tensor's rows are the columns of its column-major copy (as sample_experts counts them).
  const std::uint64_t rows = l.copied.cols;
  spec.valid_rows = g.padded ? valid_rows(op.tokens, op.operand, c.expert, l.device_shaped ? ~0ull : rows) : 0;
  if (const auto full = reserve(l.staging(), l.payload(), p)) return full;
  prepare_expert(p, spec, op.view, op.alpha, l);
  PlanSlot slot = to(p.staged);
  slot.rows = l.copied.rows;
  slot.cols = l.copied.cols;
  slot.ld = static_cast<unsigned long long>(l.copied.ld);
  slot.capacity = l.codes;
  slot.scales_capacity = l.scales;
  slot.index = c.expert;
  plan.entries.emplace_back(op.slot, slot);
  return std::nullopt;
}

CUresult Capture::replay(CUgraphExec exec, const Recording& r, const std::vector<Chosen>& chosen, CUstream stream,
                         GraphLaunch launch, std::vector<shm::DropReason>& dropped) {
  // A replay nobody samples: only the ordering behind the last plan's clearing.
  const auto unsampled = [&] {
    graphs_.before_replay(exec, stream);
    const CUresult result = launch();
    graphs_.after_replay(exec, stream, nullptr);
    return result;
  };
  if (chosen.empty()) return unsampled();
  std::unique_lock<std::mutex> lock(mu_);
  const std::optional<shm::DropReason> problem = !writer_ ? shm::DropReason::kRingFull : staging_.problem();
  std::vector<PendingRecord> records;
  ReplayPlan plan;
  for (const Chosen& c : chosen) {
    PendingRecord p;
    if (const auto dropped_as = problem ? problem : replay_record(r, c, p, plan)) {
      dropped.push_back(*dropped_as);
      continue;
    }
    records.push_back(p);
  }
  if (records.empty()) {
    lock.unlock();
    return unsampled();
  }
  bool ok = graphs_.before_replay(exec, stream) && write_plan(plan.entries, false, stream);
  const CUresult result = launch();
  ok = ok && result == CUDA_SUCCESS;
  // Cleared behind the replay, or a later one would copy into staging that is no longer its.
  // Should that fail, sampling stops: the staging is then never handed out again.
  CUevent cleared = write_plan(plan.entries, true, stream) ? graphs_.take_event() : nullptr;
  if (cleared != nullptr && cu_.event_record(cleared, stream) != CUDA_SUCCESS) {
    cu_.event_destroy(cleared);
    cleared = nullptr;
  }
  if (cleared == nullptr) {
    staging_.give_up();
    ok = false;
  }
  graphs_.after_replay(exec, stream, cleared);
  for (PendingRecord& p : records) {
    p.copied = ok ? staging_.mark(stream) : nullptr;
    if (p.copied == nullptr) {
      p.record->kind = shm::RecordKind::kPadding;
      dropped.push_back(shm::DropReason::kCudaError);
    }
  }
  publisher_->enqueue(lock, records);
  return result;
}

}  // namespace fp8scope::hook
