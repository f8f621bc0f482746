#include "fp8scope/ingest/sample_validation.h"

#include <cmath>
#include <limits>

#include "fp8scope/wire/wire.h"

namespace fp8scope::server {

bool valid_label(const std::string& value) {
  if (value.empty() || value.size() > kMaxLabelBytes) return false;
  for (unsigned char c : value) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

std::optional<Refusal> check_hello(const v1::Hello& hello) {
  if (hello.protocol_version() < wire::kOldestProtocolVersion || hello.protocol_version() > wire::kProtocolVersion) {
    return Refusal{"bad_version", "unsupported protocol version " + std::to_string(hello.protocol_version()) +
                                      "; this daemon speaks fp8scope.v1 versions " +
                                      std::to_string(wire::kOldestProtocolVersion) + " to " +
                                      std::to_string(wire::kProtocolVersion)};
  }
  if (!valid_label(hello.job()) || !valid_label(hello.run())) {
    return Refusal{"bad_hello", "job and run must be 1.." + std::to_string(kMaxLabelBytes) + " printable ASCII characters"};
  }
  // The host is logged and stored: no line breaks to forge log lines with, no megabyte lines.
  if (!hello.host().empty() && !valid_label(hello.host())) {
    return Refusal{"bad_hello", "host must be at most " + std::to_string(kMaxLabelBytes) + " printable ASCII characters"};
  }
  if (hello.world_size() != 0 && hello.rank() >= hello.world_size()) {
    return Refusal{"bad_hello", "rank " + std::to_string(hello.rank()) + " is not below world_size " +
                                    std::to_string(hello.world_size())};
  }
  return std::nullopt;
}

namespace {

using Step = std::optional<Refusal>;  // each check below: nothing, or why the header is refused

Refusal refusal(std::string reason, std::string message) { return {std::move(reason), std::move(message)}; }

// What the sample is: its type, place and role, each a value the vocabulary has.
Step check_identity(const v1::TensorHeader& h, SampleHeader& s) {
  const std::optional<DType> dtype = wire::from_wire(h.dtype());
  if (!dtype) return refusal("bad_dtype", "unknown dtype " + std::to_string(h.dtype()));
  if (!valid_label(h.layer())) {
    return refusal("bad_layer", "layer must be 1.." + std::to_string(kMaxLabelBytes) + " printable ASCII characters");
  }
  const std::optional<Operand> operand = wire::from_wire(h.operand());
  if (!operand) return refusal("bad_operand", "operand must be x, w, dy or out");
  if (h.step() > kMaxStep) {
    return refusal("bad_step", "step " + std::to_string(h.step()) + " is above " + std::to_string(kMaxStep));
  }
  const std::optional<GemmRole> gemm = wire::from_wire(h.gemm());
  if (!gemm) return refusal("bad_gemm", "gemm must be fprop, dgrad, wgrad or unknown");
  s.dtype = *dtype;
  s.step = h.step();
  s.layer = h.layer();
  s.gemm = *gemm;
  s.operand = *operand;
  s.source_call = h.source_call();
  return std::nullopt;
}

// The shape: positive dimensions whose product (and byte count) cannot overflow.
Step check_shape(const v1::TensorHeader& h, SampleHeader& s) {
  if (h.shape_size() > kMaxRank) {
    return refusal("bad_shape", "expected at most " + std::to_string(kMaxRank) + " dimensions, got " +
                                    std::to_string(h.shape_size()));
  }
  std::int64_t numel = 1;
  for (std::int64_t d : h.shape()) {
    if (d <= 0) return refusal("bad_shape", "expected every dimension > 0, got " + std::to_string(d));
    if (numel > std::numeric_limits<std::int64_t>::max() / d) return refusal("bad_shape", "element count overflows");
    numel *= d;
  }
  if (numel > std::numeric_limits<std::int64_t>::max() / 8) return refusal("bad_shape", "element count overflows");
  s.shape.assign(h.shape().begin(), h.shape().end());
  s.cols = h.shape_size() == 0 ? 1 : h.shape(h.shape_size() - 1);
  s.rows = numel / s.cols;
  s.codes_bytes = tensor_bytes(s.dtype, static_cast<std::uint64_t>(s.rows), static_cast<std::uint64_t>(s.cols));
  if (s.codes_bytes == 0) {
    return refusal("bad_shape", "e2m1 codes come two a byte: expected an even last dimension, got " + std::to_string(s.cols));
  }
  return std::nullopt;
}

// The scale layout: unset means per-tensor for codes (what protocol 1 clients send) and none else;
// a block layout's scale tensor has the size its shape says.
Step check_scale_layout(const v1::TensorHeader& h, SampleHeader& s) {
  const bool codes = dtype_is_codes(s.dtype);
  if (h.scale_mode() == v1::SCALE_MODE_UNSPECIFIED) {
    s.scale_layout = codes ? ScaleLayout::kTensorScalar : ScaleLayout::kNone;
  } else if (const std::optional<ScaleLayout> layout = wire::from_wire(h.scale_mode())) {
    s.scale_layout = *layout;
  } else {
    return refusal("bad_scale_mode", "unknown scale mode " + std::to_string(h.scale_mode()));
  }
  if (codes == (s.scale_layout == ScaleLayout::kNone)) {
    return refusal("bad_scale_mode", std::string(dtype_name(s.dtype)) + (codes ? " codes need a scale mode" :
                                                                               " data takes no scale mode"));
  }
  s.k_is_outer = h.k_is_outer();
  if (!is_block_layout(s.scale_layout)) {
    if (h.scale_bytes() == 0) return std::nullopt;
    return refusal("size_mismatch", "scale_bytes " + std::to_string(h.scale_bytes()) + " without a block scale mode");
  }
  if (h.shape_size() != 2) {
    return refusal("bad_shape", "a block-scaled operand is one matrix: expected 2 dimensions, got " +
                                    std::to_string(h.shape_size()));
  }
  s.scale_bytes = scale_tensor_bytes(s.scale_layout, ScaledShape{s.rows, s.cols, s.k_is_outer});
  if (h.scale_bytes() == s.scale_bytes) return std::nullopt;
  return refusal("size_mismatch", std::string(scale_layout_name(s.scale_layout)) + " scales of this shape take " +
                                      std::to_string(s.scale_bytes) + " bytes, the header says " +
                                      std::to_string(h.scale_bytes()));
}

// The recipes a cast names (the scaling modes of TE's casts; the flags refine them).
bool cast_recipe(RecipeKind r) {
  switch (r) {
    case RecipeKind::kTensorCurrent:
    case RecipeKind::kTensorDelayed:
    case RecipeKind::kMxfp8:
    case RecipeKind::kBlock1x128:
    case RecipeKind::kBlock128x128:
    case RecipeKind::kNvfp4: return true;
    case RecipeKind::kMxfp4:
    case RecipeKind::kMxfp8_2d:
    case RecipeKind::kNvfp4Rht:
    case RecipeKind::kNvfp4FourOverSix:
    case RecipeKind::kNvfp4Sr:
    case RecipeKind::kNvfp4Row:
    case RecipeKind::kNvfp4Te: break;
  }
  return false;
}

bool cast_input_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// A cast: known words, an input whose size is the part the header declares, and codes of the
// tensor the cast wrote (its transpose for a transposed copy).
Step check_cast(const v1::TensorHeader& h, SampleHeader& s) {
  if (!h.has_cast()) return std::nullopt;
  const v1::CastPart& w = h.cast();
  CastHeader c;
  const std::optional<CastSource> source = wire::from_wire(w.source());
  const std::optional<RecipeKind> recipe = wire::from_wire(w.recipe());
  const std::optional<DType> input = wire::from_wire(w.input_dtype()), param = wire::from_wire(w.param_dtype());
  if (!source || !recipe || !cast_recipe(*recipe)) return refusal("bad_cast", "cast: unknown source or recipe");
  if (!input || !param || !cast_input_dtype(*input) || !cast_input_dtype(*param)) {
    return refusal("bad_cast", "cast: inputs must be f32, bf16 or f16");
  }
  if (!dtype_is_codes(s.dtype)) return refusal("bad_cast", "cast: the sample must hold the codes the cast wrote");
  c.source = *source;
  c.recipe = *recipe;
  c.input_dtype = *input;
  c.param_dtype = *param;
  const bool activation_source = c.source == CastSource::kActivation || c.source == CastSource::kDactivation;
  if (activation_source) {
    c.activation = wire::from_wire(w.activation());
    if (!c.activation) return refusal("bad_cast", "cast: an activation source names its activation");
    if (c.source == CastSource::kDactivation && activation_gated(*c.activation)) {
      return refusal("bad_cast", "cast: gated gradients are cast from their input");
    }
  }
  c.rows = w.rows();
  c.cols = w.cols();
  constexpr std::int64_t kMaxSide = std::int64_t{1} << 31;
  if (c.rows <= 0 || c.cols <= 0 || c.rows > kMaxSide || c.cols > kMaxSide) {
    return refusal("bad_cast", "cast: expected rows and cols in 1..2^31");
  }
  c.columnwise = w.columnwise();
  c.transposed = w.transposed();
  c.zero_centered_gamma = w.zero_centered_gamma();
  c.stochastic = w.stochastic_rounding();
  c.power_of_2 = w.power_of_2_scales();
  c.two_dimensional = w.two_dimensional();
  c.row_scaled = w.row_scaled();
  c.four_over_six = w.four_over_six();
  c.unmodeled = w.unmodeled();
  c.epsilon = w.epsilon();
  c.limit = w.activation_limit();
  c.alpha = w.activation_alpha();
  c.linear_offset = w.activation_linear_offset();
  for (float v : {c.epsilon, c.limit, c.alpha, c.linear_offset}) {
    if (!std::isfinite(v)) return refusal("bad_cast", "cast: parameters must be finite");
  }
  if (!valid_label(w.entry_point())) return refusal("bad_cast", "cast: entry_point must be printable ASCII");
  c.entry_point = w.entry_point();
  if (c.source == CastSource::kActivation && activation_gated(*c.activation) && c.cols % 2 != 0) {
    return refusal("bad_cast", "cast: a gated activation's input holds two halves: expected even cols");
  }
  if (c.source == CastSource::kHadamard && c.columnwise && c.rows % 16 != 0) {
    return refusal("bad_cast", "cast: the Hadamard transform runs over 16 rows: expected rows a multiple of 16");
  }
  c.layout = cast_layout(c.source, static_cast<std::uint64_t>(c.rows), static_cast<std::uint64_t>(c.cols), c.input_dtype,
                         c.param_dtype);
  c.bytes = w.bytes();
  if (c.bytes != c.layout.total) {
    return refusal("size_mismatch", "cast: " + std::string(cast_source_name(c.source)) + " of this shape takes " +
                                        std::to_string(c.layout.total) + " bytes, the header says " + std::to_string(c.bytes));
  }
  // The tensor cast (a Hadamard column-wise copy is the input's transpose by construction).
  const std::int64_t out_rows = c.rows, out_cols = c.output_cols();
  const bool transposed = c.transposed || (c.source == CastSource::kHadamard && c.columnwise);
  const std::int64_t want_rows = transposed ? out_cols : out_rows, want_cols = transposed ? out_rows : out_cols;
  if (s.rows != want_rows || s.cols != want_cols || s.shape.size() != 2 || s.valid_rows != 0 || s.expert) {
    return refusal("bad_cast", "cast: the codes are " + std::to_string(s.rows) + " x " + std::to_string(s.cols) +
                                   ", the cast wrote " + std::to_string(want_rows) + " x " + std::to_string(want_cols));
  }
  s.cast = std::move(c);
  return std::nullopt;
}

Step check_payload(const v1::TensorHeader& h, const SampleHeader& s, std::uint64_t max_sample_bytes) {
  const std::uint64_t cast_bytes = h.has_cast() ? h.cast().bytes() : 0;
  if (cast_bytes > std::numeric_limits<std::uint64_t>::max() / 2) return refusal("size_mismatch", "cast: bytes overflow");
  const std::uint64_t bytes = s.codes_bytes + s.scale_bytes + cast_bytes;
  if (bytes != h.payload_bytes()) {
    return refusal("size_mismatch", "payload_bytes " + std::to_string(h.payload_bytes()) + " != shape x dtype" +
                                        (s.scale_bytes ? " + scale tensor" : "") + (cast_bytes ? " + cast" : "") +
                                        " = " + std::to_string(bytes));
  }
  if (bytes > max_sample_bytes) {
    return refusal("too_large", "sample of " + std::to_string(bytes) + " bytes exceeds the daemon's limit of " +
                                    std::to_string(max_sample_bytes));
  }
  return std::nullopt;
}

// Experts: an index below the call's count, tokens for every expert or none, valid rows within the
// matrix (under block scales only when the token rows' scales can be read alone; other blocks
// would straddle tokens and padding).
Step check_experts(const v1::TensorHeader& h, SampleHeader& s) {
  if (h.experts() > kMaxExperts) {
    return refusal("bad_expert", "experts " + std::to_string(h.experts()) + " is above " + std::to_string(kMaxExperts));
  }
  if (h.has_expert() && (h.expert() >= kMaxExperts || (h.experts() != 0 && h.expert() >= h.experts()))) {
    return refusal("bad_expert", "expert " + std::to_string(h.expert()) + " is not one of the call's " +
                                     std::to_string(h.experts()) + " experts");
  }
  if (h.expert_tokens_size() != 0 && static_cast<std::uint32_t>(h.expert_tokens_size()) != h.experts()) {
    return refusal("bad_expert", "expert_tokens has " + std::to_string(h.expert_tokens_size()) + " entries for " +
                                     std::to_string(h.experts()) + " experts");
  }
  for (int e = 0; e < h.expert_tokens_size(); ++e) {
    if (h.expert_tokens(e) > kMaxExpertTokens) {
      return refusal("bad_expert", "expert_tokens[" + std::to_string(e) + "] = " + std::to_string(h.expert_tokens(e)) +
                                       " is more than any matrix holds (at most " + std::to_string(kMaxExpertTokens) + ")");
    }
  }
  const std::uint64_t first_dimension = s.shape.empty() ? 1 : static_cast<std::uint64_t>(s.shape[0]);
  const bool rows_separable = !is_block_layout(s.scale_layout) || scales_of_rows_are_a_prefix(s.scale_layout, s.k_is_outer);
  if (h.valid_rows() > first_dimension || (h.valid_rows() != 0 && (s.shape.size() != 2 || !rows_separable))) {
    return refusal("bad_expert", "valid_rows " + std::to_string(h.valid_rows()) +
                                     " must be at most the rows of a 2-D sample whose block scales are per row");
  }
  if (h.has_expert()) s.expert = h.expert();
  s.experts = h.experts();
  s.expert_tokens.assign(h.expert_tokens().begin(), h.expert_tokens().end());
  s.valid_rows = h.valid_rows() == first_dimension ? 0 : static_cast<std::int64_t>(h.valid_rows());
  return std::nullopt;
}

Step check_scales(const v1::TensorHeader& h, SampleHeader& s) {
  if (!std::isfinite(h.scale_inv()) || h.scale_inv() < 0.0f) {
    return refusal("bad_scale", "scale_inv must be finite and >= 0, got " + std::to_string(h.scale_inv()));
  }
  if (!std::isfinite(h.global_scale_inv()) || h.global_scale_inv() < 0.0f) {
    return refusal("bad_scale", "global_scale_inv must be finite and >= 0, got " + std::to_string(h.global_scale_inv()));
  }
  if (!std::isfinite(h.gemm_alpha())) {
    return refusal("bad_scale", "gemm_alpha must be finite, got " + std::to_string(h.gemm_alpha()));
  }
  s.scale_inv = h.scale_inv();
  s.global_scale_inv = h.global_scale_inv();
  s.gemm_alpha = h.gemm_alpha();
  return std::nullopt;
}

}  // namespace

HeaderCheck check_header(const v1::TensorHeader& h, std::uint64_t max_sample_bytes) {
  SampleHeader s;
  Step refused = check_identity(h, s);
  if (!refused) refused = check_shape(h, s);
  if (!refused) refused = check_scale_layout(h, s);
  if (!refused) refused = check_payload(h, s, max_sample_bytes);
  if (!refused) refused = check_scales(h, s);
  if (!refused) refused = check_experts(h, s);
  if (!refused) refused = check_cast(h, s);
  if (refused) return {std::nullopt, std::move(*refused)};
  return {std::move(s), {}};
}

}  // namespace fp8scope::server
