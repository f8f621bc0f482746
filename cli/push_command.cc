#include "fp8scope/cli/push_command.h"

#include "fp8scope/cli/number_checks.h"

#include <CLI/CLI.hpp>
#include <cstring>
#include <optional>
#include <unistd.h>

#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/kernels/scale_layout.h"
#include "fp8scope/tensorfile/tensor_file.h"
#include "fp8scope/wire/wire.h"
#include "fp8scope/cli/scale_source.h"

namespace fp8scope::cli {
namespace {

constexpr int kNotAccepted = 3;

}  // namespace

void add_push_command(CLI::App& app, PushOptions& o) {
  CLI::App* cmd = app.add_subcommand("push", "Send tensors from a .npy or .safetensors file to fp8scoped");
  add_connection_flags(cmd, o.connection);
  cmd->add_option("FILE", o.file, ".npy or .safetensors file")->required();
  cmd->add_option("--tensor", o.tensors, "Send only this tensor (repeatable); default: every float tensor");
  cmd->add_option("--layer", o.layer,
                  "Layer label; with several tensors each is labelled LAYER/<tensor name>")->required();
  cmd->add_option("--gemm", o.gemm, "fprop, dgrad, wgrad or unknown")->capture_default_str();
  cmd->add_option("--operand", o.operand, "x, w, dy or out (what the GEMM wrote)")->required();
  cmd->add_option("--step", o.step, "Training step of the sample")->capture_default_str()->check(step_number());
  cmd->add_option("--run", o.run, "Run name")->envname("FP8SCOPE_RUN")->capture_default_str();
  cmd->add_option("--job", o.job, "Job name")->envname("FP8SCOPE_JOB")->capture_default_str();
  cmd->add_option("--rank", o.rank, "Rank of the sending process")->capture_default_str();
  cmd->add_option("--world-size", o.world_size, "Ranks in the job")->capture_default_str();
  cmd->add_option("--scale-inv", o.scale_inv, "FP8 tensors: the dequantization scale they were stored with")
      ->capture_default_str();
  cmd->add_option("--dtype", o.dtype, ".npy raw element type: bf16, e4m3, e5m2 or e2m1 (packed FP4)");
  cmd->add_option("--scale-layout", o.scale_layout,
                  "Codes with block scales in this cuBLASLt layout (vec32_ue8m0, vec16_ue4m3, vec128_32f, "
                  "blk128x128_32f, outer_vec_32f), as the GEMM read them");
  cmd->add_option("--scales", o.scales, "With --scale-layout: a tensor of FILE, or a .npy/.safetensors file");
  cmd->add_flag("--k-outer", o.k_outer, "Block scales run along the first dimension, not the last");
  cmd->add_option("--global-scale-inv", o.global_scale_inv, "NVFP4: the per-tensor factor the block scales multiply");
  cmd->add_option("--expert", o.expert, "A mixture-of-experts layer's expert this tensor belongs to")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{65535}));
  cmd->add_option("--expert-tokens", o.expert_tokens, "With --expert: the tokens routed to each expert of the call")
      ->delimiter(',');
  cmd->add_option("--valid-rows", o.valid_rows, "Rows holding tokens; the rest of the first dimension is padding");
  cmd->add_option("--cast-input", o.cast_input,
                  "Codes: the high-precision tensor they were cast from (.npy/.safetensors, its first tensor; f32, bf16 "
                  "or f16), sent with them so the daemon reports the cast's own error and checks its codes");
  cmd->add_option("--cast-recipe", o.cast_recipe,
                  "With --cast-input: the cast's recipe: tensor_delayed, tensor_current, mxfp8, block_1x128, "
                  "block_128x128 or nvfp4");
  cmd->add_option("--cast-scale", o.cast_scale, "With --cast-input, per-tensor recipes: the scale the cast multiplied by");
  cmd->add_option("--cast-amax", o.cast_amax, "With --cast-input, nvfp4: the per-tensor amax the cast used");
  cmd->add_flag("--cast-columnwise", o.cast_columnwise, "With --cast-input: the codes are the cast's column-wise copy");
  cmd->add_flag("--cast-transposed", o.cast_transposed, "With --cast-input: the codes are the input's transpose");
  cmd->add_flag("--cast-2d", o.cast_2d, "With --cast-input: NVFP4's 16x16 or MXFP8's 32x32 blocks");
}

namespace {

// What push sends: the file's tensors asked for and, for a job's own block-scaled codes, their
// scales, and the input of the cast that wrote them.
struct PushInput {
  TensorFile file;
  const ScaleLayoutTerm* layout = nullptr;
  ScaleSource scales;
  std::vector<const FileTensor*> chosen;
  std::optional<TensorFile> cast_file;
  std::optional<RecipeKind> cast_recipe;
};

Result<PushInput> read_input(const PushOptions& o) {
  ReadOptions read;
  if (!o.dtype.empty()) read.npy_raw_dtype = dtype_from_name(o.dtype);
  Result<TensorFile> file = read_tensor_file(o.file, read);
  if (!file.ok()) return file.status();
  PushInput in{std::move(file).value(), nullptr, {}, {}, std::nullopt, std::nullopt};
  if (!o.scale_layout.empty()) {
    in.layout = scale_layout_from_name(o.scale_layout);
    if (in.layout == nullptr || in.layout->value == ScaleLayout::kTensorScalar || o.scales.empty()) {
      return Status::error("--scale-layout: expected a block layout with --scales (scalar scales take --scale-inv), got " +
                           o.scale_layout + (o.scales.empty() ? " without --scales" : ""));
    }
    Result<ScaleSource> scales = read_scale_source(o.scales, in.file);
    if (!scales.ok()) return scales.status();
    in.scales = std::move(scales).value();
  }
  for (const std::string& name : o.tensors) {
    if (in.file.find(name) == nullptr) return Status::error(o.file + ": no tensor named '" + name + "'");
  }
  for (const FileTensor& t : in.file.tensors()) {
    const bool wanted = o.tensors.empty() || std::find(o.tensors.begin(), o.tensors.end(), t.name) != o.tensors.end();
    if (wanted && t.dtype && t.numel() > 0 && t.name != in.scales.tensor) in.chosen.push_back(&t);
  }
  if (in.chosen.empty()) return Status::error(o.file + ": no floating-point tensor to send");
  if (!o.cast_input.empty()) {
    in.cast_recipe = recipe_kind_from_name(o.cast_recipe);
    const bool known = in.cast_recipe && (*in.cast_recipe == RecipeKind::kTensorDelayed ||
                                          *in.cast_recipe == RecipeKind::kTensorCurrent || *in.cast_recipe == RecipeKind::kMxfp8 ||
                                          *in.cast_recipe == RecipeKind::kBlock1x128 ||
                                          *in.cast_recipe == RecipeKind::kBlock128x128 || *in.cast_recipe == RecipeKind::kNvfp4);
    if (!known) {
      return Status::error("--cast-recipe: expected tensor_delayed, tensor_current, mxfp8, block_1x128, block_128x128 or "
                           "nvfp4, got '" + o.cast_recipe + "'");
    }
    Result<TensorFile> cast = read_tensor_file(o.cast_input, ReadOptions{});
    if (!cast.ok()) return cast.status();
    const FileTensor& t = cast.value().tensors().front();
    if (!t.dtype || (*t.dtype != DType::kF32 && *t.dtype != DType::kBF16 && *t.dtype != DType::kF16)) {
      return Status::error("--cast-input: expected an f32, bf16 or f16 tensor, got " + t.file_dtype);
    }
    if (in.chosen.size() != 1) return Status::error("--cast-input: goes with one tensor of codes (--tensor)");
    in.cast_file = std::move(cast).value();
  }
  if (!o.expert_tokens.empty() && (o.expert < 0 || static_cast<std::uint64_t>(o.expert) >= o.expert_tokens.size())) {
    return Status::error("--expert-tokens: expected one count per expert of the call, --expert among them");
  }
  return in;
}

// The cast's part after the codes and scales: CastScalars (the scale, the amax for both copies, no
// no-op flag), then its input, as the hook sends one (vocabulary/cast_capture.h).
void add_cast(const PushOptions& o, const PushInput& in, v1::TensorHeader& h, std::vector<std::uint8_t>& payload) {
  const FileTensor& t = in.cast_file->tensors().front();
  const auto rows = static_cast<std::uint64_t>(t.view().rows), cols = static_cast<std::uint64_t>(t.view().cols);
  const CastLayout layout = cast_layout(CastSource::kInput, rows, cols, *t.dtype, *t.dtype);
  v1::CastPart* c = h.mutable_cast();
  c->set_source(wire::to_wire(CastSource::kInput));
  c->set_recipe(wire::to_wire(*in.cast_recipe));
  c->set_input_dtype(wire::to_wire(*t.dtype));
  c->set_param_dtype(wire::to_wire(*t.dtype));
  c->set_rows(static_cast<std::int64_t>(rows));
  c->set_cols(static_cast<std::int64_t>(cols));
  c->set_columnwise(o.cast_columnwise);
  c->set_transposed(o.cast_transposed);
  c->set_two_dimensional(o.cast_2d);
  c->set_power_of_2_scales(true);  // Float8BlockScaling's default
  c->set_entry_point("push");
  c->set_bytes(layout.total);
  const CastScalars scalars{o.cast_scale, o.cast_amax, o.cast_amax, 0.0f};
  const std::size_t at = payload.size();
  payload.resize(at + layout.total, 0);
  std::memcpy(payload.data() + at, &scalars, sizeof scalars);
  std::memcpy(payload.data() + at + layout.offset[static_cast<int>(CastPart::kInput)], t.bytes.data(), t.bytes.size());
}

// One tensor as a sample: its header, and its payload (the codes, then any scale tensor, then the
// cast that wrote them).
std::pair<v1::TensorHeader, std::vector<std::uint8_t>> sample_of(const PushOptions& o, const PushInput& in,
                                                                 const FileTensor& t, GemmRole gemm, Operand operand) {
  v1::TensorHeader h;
  h.set_step(o.step);
  h.set_layer(in.chosen.size() == 1 ? o.layer : o.layer + "/" + t.name);
  h.set_gemm(wire::to_wire(gemm));
  h.set_operand(wire::to_wire(operand));
  h.set_dtype(wire::to_wire(*t.dtype));
  for (std::int64_t d : t.shape) h.add_shape(d);
  h.set_leading_dimension(t.shape.empty() ? 1 : t.shape.back());
  const bool codes = dtype_is_codes(*t.dtype);
  h.set_scale_inv(codes && in.layout == nullptr ? o.scale_inv : 0.0f);
  h.set_scale_mode(!codes ? wire::to_wire(ScaleLayout::kNone)
                          : wire::to_wire(in.layout != nullptr ? in.layout->value : ScaleLayout::kTensorScalar));
  h.set_source_call("push");
  if (o.expert >= 0) {
    h.set_expert(static_cast<std::uint32_t>(o.expert));
    h.set_experts(static_cast<std::uint32_t>(o.expert_tokens.size()));  // 0: not known
    for (std::uint64_t n : o.expert_tokens) h.add_expert_tokens(n);
  }
  h.set_valid_rows(o.valid_rows);
  std::vector<std::uint8_t> payload(t.bytes.begin(), t.bytes.end());
  if (in.layout != nullptr && codes) {  // the scale tensor travels after the codes
    payload.insert(payload.end(), in.scales.bytes.begin(), in.scales.bytes.end());
    h.set_scale_bytes(in.scales.bytes.size());
    h.set_k_is_outer(o.k_outer);
    h.set_global_scale_inv(o.global_scale_inv);
  }
  if (in.cast_file) add_cast(o, in, h, payload);
  return {std::move(h), std::move(payload)};
}

// Each sample's ack, as a line; kNotAccepted when any was not accepted.
int report_acks(const PushOptions& o, const std::map<std::uint64_t, v1::Ack>& acks,
                const std::map<std::uint64_t, std::string>& names, std::ostream& out, std::ostream& err) {
  int code = 0;
  for (const auto& [id, ack] : acks) {
    const std::string& name = names.at(id);
    if (ack.outcome() == v1::SAMPLE_OUTCOME_ACCEPTED) {
      out << "accepted " << name << " step " << o.step << "\n";
    } else {
      err << "fp8scope push: " << name << ": " << (ack.outcome() == v1::SAMPLE_OUTCOME_DROPPED ? "dropped" : "rejected")
          << " (" << ack.reason() << ")\n";
      code = kNotAccepted;
    }
  }
  return code;
}

}  // namespace

int run_push(const PushOptions& o, std::ostream& out, std::ostream& err) {
  const auto gemm = gemm_from_name(o.gemm);
  const auto operand = operand_from_name(o.operand);
  if (!gemm || !operand) {
    err << "fp8scope push: expected --gemm fprop|dgrad|wgrad|unknown and --operand x|w|dy, got " << o.gemm << " / "
        << o.operand << "\n";
    return kUsage;
  }
  Result<PushInput> in = read_input(o);
  if (!in.ok()) {
    err << "fp8scope push: " << in.message() << "\n";
    return kUsage;
  }
  Result<ConnectionOptions> conn = resolve(o.connection);
  if (!conn.ok()) {
    err << "fp8scope push: " << conn.message() << "\n";
    return kUsage;
  }
  const v1::Hello hello = make_hello(o.job, o.run, o.rank, o.world_size, static_cast<std::uint32_t>(getpid()));
  auto stream = SampleStream::open(conn.value(), hello, o.connection.timeout_seconds);
  if (!stream.ok()) {
    err << "fp8scope push: " << stream.message() << "\n";
    return kUnreachable;
  }
  std::map<std::uint64_t, std::string> names;
  for (const FileTensor* t : in.value().chosen) {
    const auto [header, payload] = sample_of(o, in.value(), *t, *gemm, *operand);
    Result<std::uint64_t> id = stream.value()->send(header, payload);
    if (!id.ok()) {
      err << "fp8scope push: " << id.message() << "\n";
      return kUnreachable;
    }
    names[id.value()] = header.layer();
  }
  auto acks = stream.value()->wait_for_acks(o.connection.timeout_seconds + 60.0);
  if (!acks.ok()) {
    err << "fp8scope push: " << acks.message() << "\n";
    return kUnreachable;
  }
  const int code = report_acks(o, acks.value(), names, out, err);
  if (Status s = stream.value()->close(); !s.ok()) {
    err << "fp8scope push: " << s.message() << "\n";
    return kUnreachable;
  }
  return code;
}

}  // namespace fp8scope::cli
