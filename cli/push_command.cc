#include "fp8scope/cli/push_command.h"

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
  cmd->add_option("--operand", o.operand, "x, w or dy")->required();
  cmd->add_option("--step", o.step, "Training step of the sample")->capture_default_str();
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
}

int run_push(const PushOptions& o, std::ostream& out, std::ostream& err) {
  const auto gemm = gemm_from_name(o.gemm);
  const auto operand = operand_from_name(o.operand);
  if (!gemm || !operand) {
    err << "fp8scope push: expected --gemm fprop|dgrad|wgrad|unknown and --operand x|w|dy, got " << o.gemm << " / "
        << o.operand << "\n";
    return kUsage;
  }
  ReadOptions read;
  if (!o.dtype.empty()) read.npy_raw_dtype = dtype_from_name(o.dtype);
  Result<TensorFile> file = read_tensor_file(o.file, read);
  if (!file.ok()) {
    err << "fp8scope push: " << file.message() << "\n";
    return kUsage;
  }
  const ScaleLayoutTerm* layout = nullptr;
  ScaleSource scales;
  if (!o.scale_layout.empty()) {
    layout = scale_layout_from_name(o.scale_layout);
    if (layout == nullptr || layout->value == ScaleLayout::kTensorScalar || o.scales.empty()) {
      err << "fp8scope push: --scale-layout: expected a block layout with --scales (scalar scales take --scale-inv), "
             "got "
          << o.scale_layout << (o.scales.empty() ? " without --scales" : "") << "\n";
      return kUsage;
    }
    Result<ScaleSource> s = read_scale_source(o.scales, file.value());
    if (!s.ok()) {
      err << "fp8scope push: " << s.message() << "\n";
      return kUsage;
    }
    scales = std::move(s).value();
  }
  std::vector<const FileTensor*> chosen;
  for (const FileTensor& t : file.value().tensors()) {
    const bool wanted = o.tensors.empty() || std::find(o.tensors.begin(), o.tensors.end(), t.name) != o.tensors.end();
    if (wanted && t.dtype && t.numel() > 0 && t.name != scales.tensor) chosen.push_back(&t);
  }
  for (const std::string& name : o.tensors) {
    if (file.value().find(name) == nullptr) {
      err << "fp8scope push: " << o.file << ": no tensor named '" << name << "'\n";
      return kUsage;
    }
  }
  if (chosen.empty()) {
    err << "fp8scope push: " << o.file << ": no floating-point tensor to send\n";
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
  for (const FileTensor* t : chosen) {
    v1::TensorHeader h;
    h.set_step(o.step);
    h.set_layer(chosen.size() == 1 ? o.layer : o.layer + "/" + t->name);
    h.set_gemm(wire::to_wire(*gemm));
    h.set_operand(wire::to_wire(*operand));
    h.set_dtype(wire::to_wire(*t->dtype));
    for (std::int64_t d : t->shape) h.add_shape(d);
    h.set_leading_dimension(t->shape.empty() ? 1 : t->shape.back());
    const bool codes = dtype_is_codes(*t->dtype);
    h.set_scale_inv(codes && layout == nullptr ? o.scale_inv : 0.0f);
    h.set_scale_mode(!codes ? v1::SCALE_MODE_NONE
                            : (layout != nullptr ? wire::to_wire(layout->value) : v1::SCALE_MODE_TENSOR_SCALAR));
    h.set_source_call("push");
    std::vector<std::uint8_t> payload(t->bytes.begin(), t->bytes.end());
    if (layout != nullptr && codes) {  // the scale tensor travels after the codes
      payload.insert(payload.end(), scales.bytes.begin(), scales.bytes.end());
      h.set_scale_bytes(scales.bytes.size());
      h.set_k_is_outer(o.k_outer);
      h.set_global_scale_inv(o.global_scale_inv);
    }
    Result<std::uint64_t> id = stream.value()->send(h, payload);
    if (!id.ok()) {
      err << "fp8scope push: " << id.message() << "\n";
      return kUnreachable;
    }
    names[id.value()] = h.layer();
  }
  auto acks = stream.value()->wait_for_acks(o.connection.timeout_seconds + 60.0);
  if (!acks.ok()) {
    err << "fp8scope push: " << acks.message() << "\n";
    return kUnreachable;
  }
  int code = 0;
  for (const auto& [id, ack] : acks.value()) {
    if (ack.outcome() == v1::SAMPLE_OUTCOME_ACCEPTED) {
      out << "accepted " << names[id] << " step " << o.step << "\n";
    } else {
      err << "fp8scope push: " << names[id] << ": "
          << (ack.outcome() == v1::SAMPLE_OUTCOME_DROPPED ? "dropped" : "rejected") << " (" << ack.reason() << ")\n";
      code = kNotAccepted;
    }
  }
  if (Status s = stream.value()->close(); !s.ok()) {
    err << "fp8scope push: " << s.message() << "\n";
    return kUnreachable;
  }
  return code;
}

}  // namespace fp8scope::cli
