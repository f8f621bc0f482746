// What the hook does at a Transformer Engine cast (DESIGN.md "The casts"): on a step that may be
// sampled, read the call's tensors through TE's getters, and copy the cast's input (or the fused
// kernel's inputs) and the scalars it used into the cast stash on the call's stream, under the
// device pointers of the codes it wrote; the GEMM that reads them takes them into its record.
// Under graph capture the same copy becomes a node of the graph (graph_recorder.h).
#include <cstdio>

#include "fp8scope/hook/hook_runtime.h"
#include "fp8scope/hook/te_tensors.h"

namespace fp8scope::hook {
namespace {

// Where row `row` of a tensor's data starts (a split of the input).
const void* row_start(void* data, DType dtype, std::int64_t cols, std::uint64_t row) {
  return static_cast<const std::uint8_t*>(data) + row * tensor_bytes(dtype, 1, static_cast<std::uint64_t>(cols));
}

}  // namespace

bool HookRuntime::cast_step_selected(std::uint64_t step) {
  return sampler_.step_selected(link_.segment(), step) ||
         (clock_.needs_signature() && sampler_.step_selected(link_.segment(), step + 1));
}

void HookRuntime::observe_cast(const TeCastCall& call) {
  if (!te_casts_seen_.load(std::memory_order_relaxed)) te_casts_seen_.store(true, std::memory_order_relaxed);
  // Under capture, every cast is recorded into the graph: a replay's step decides later.
  const std::optional<DriverApi::CaptureInfo> capture = captured(call.stream);
  const std::uint64_t step = clock_.current();
  if (!capture && !cast_step_selected(step)) return;
  shm::DropReason why = shm::DropReason::kCastUnreadable;
  const std::optional<CastToStash> c = read_cast(call, step, why);
  if (!c) return count(why);
  if (c->cast.record.bytes == 0) return;  // a high-precision output (an activation, a norm): no cast
  if (!capture && capture_.capturing(call.stream)) return count(shm::DropReason::kGraphCapture);
  const std::optional<shm::DropReason> dropped =
      capture ? capture_.record_cast(*capture, *c, call.stream) : capture_.stash_cast(*c, call.stream);
  if (dropped) count(*dropped);
}

std::optional<CastToStash> HookRuntime::read_cast(const TeCastCall& call, std::uint64_t step, shm::DropReason& dropped) {
  const te::Api& api = te::api();
  const std::optional<te::TensorFacts> out = te::read_tensor(api, call.output);
  if (!out) return std::nullopt;
  if (!out->quantized()) return CastToStash{};
  const std::optional<te::TensorFacts> in = te::read_tensor(api, call.input);
  if (!in || !in->dtype || dtype_is_codes(*in->dtype) || in->data == nullptr) return std::nullopt;
  te::ConfigFacts config = te::read_config(api, call.config);
  if (call.noop != nullptr) config.noop = te::data_of(api, call.noop);
  const te::RecipeFacts recipe = te::recipe_facts(*out, config);

  CastToStash c;
  c.cast.rowwise = out->data;
  c.cast.columnwise = out->columnwise;
  c.cast.columnwise_transposed = recipe.columnwise_transposed;
  c.cast.step = step;
  shm::CastRecord& r = c.cast.record;
  r.source = static_cast<std::uint32_t>(call.source) + 1;
  r.recipe = static_cast<std::uint32_t>(recipe.recipe);
  r.flags = recipe.flags | (call.zero_centered_gamma ? shm::kCastZeroCenteredGamma : 0);
  r.rows = call.split_rows != 0 ? static_cast<std::int64_t>(call.split_rows) : in->rows;
  r.cols = in->cols;
  r.epsilon = call.source == CastSource::kLayernorm || call.source == CastSource::kRmsnorm ? call.epsilon : recipe.epsilon;
  r.limit = call.limit;
  r.alpha = call.alpha;
  r.linear_offset = call.linear_offset;
  std::snprintf(r.entry_point, sizeof r.entry_point, "%s", call.entry);
  if (call.activation) r.activation = static_cast<std::uint32_t>(*call.activation) + 1;

  // The parts: each tensor's data, and the type of the parameters (gamma and beta, a dactivation's
  // input, the Hadamard matrix).
  DType param = *in->dtype;
  const auto part = [&](CastPart p, te::Tensor t, bool sets_param) {
    if (t == nullptr) return true;
    const std::optional<te::TensorFacts> f = te::read_tensor(api, t);
    if (!f || !f->dtype || dtype_is_codes(*f->dtype)) return false;
    c.parts[static_cast<int>(p)] = f->data;
    if (sets_param) param = *f->dtype;
    return true;
  };
  c.parts[static_cast<int>(CastPart::kInput)] = row_start(in->data, *in->dtype, in->cols, call.row_offset);
  if (!part(CastPart::kActivationInput, call.activation_input, true) || !part(CastPart::kGamma, call.gamma, true) ||
      !part(CastPart::kBeta, call.beta, false) || !part(CastPart::kMu, call.mu, false) ||
      !part(CastPart::kRsigma, call.rsigma, false) || !part(CastPart::kMatrix, call.matrix, true)) {
    return std::nullopt;
  }
  r.input_dtype = static_cast<std::uint32_t>(*in->dtype);
  r.param_dtype = static_cast<std::uint32_t>(param);
  c.layout = cast_layout(call.source, static_cast<std::uint64_t>(r.rows), static_cast<std::uint64_t>(r.cols), *in->dtype, param);
  if (c.layout.total == 0) {
    dropped = shm::DropReason::kUnsupportedDtype;
    return std::nullopt;
  }
  r.bytes = c.layout.total;

  // The scalars the cast used, in CastScalars' order: per-tensor FP8's scale, NVFP4's amaxes (a
  // column-wise copy without an amax of its own uses the row-wise one: cast/nvfp4/
  // quantize_transpose_nvfp4.cuh:428-430), the no-op flag.
  const bool nvfp4 = out->mode == te::ScalingMode::kNvfp4_1d;
  c.scalars[0] = out->mode == te::ScalingMode::kDelayedTensor ? out->scale : nullptr;
  c.scalars[1] = nvfp4 ? out->amax : nullptr;
  c.scalars[2] = nvfp4 ? (out->columnwise_amax != nullptr ? out->columnwise_amax : out->amax) : nullptr;
  c.scalars[3] = config.noop;
  return c;
}

}  // namespace fp8scope::hook
