// Transformer Engine's quantize entry points, interposed (DESIGN.md "The casts"): TE's PyTorch and
// JAX extensions call them as undefined dynamic symbols, resolved after TE loads its library
// RTLD_GLOBAL with no -Bsymbolic or RTLD_DEEPBIND (TE d0067d0: build_tools/pytorch.py,
// build_tools/jax.py, common/__init__.py), so the preloaded definitions below come first. Each
// runs the real call with the caller's arguments untouched (its exceptions, TE's NVTE_ERROR,
// pass through unchanged), then hands the cast to the hook, which reads the tensors before the
// caller can free them and never throws. TE's library calls some of its own entry points
// (nvte_quantize_noop calls nvte_quantize_v2): only the outermost call is looked at.
//
// The set, with their declarations at TE d0067d0 (transformer_engine/common/include/
// transformer_engine/): cast.h nvte_quantize:90 (2.0-2.2's path), nvte_quantize_noop:115,
// nvte_quantize_v2:125 (2.3+), nvte_quantize_dbias:145, nvte_quantize_dbias_d{gelu,silu,relu,qgelu,
// srelu}:190/238/286/334/382, nvte_multi_tensor_quantize:479, nvte_group_nvfp4_quantize_with_amax:
// 492; transpose.h nvte_cast_transpose:32, nvte_cast_transpose_dbias:60, nvte_multi_cast_transpose:
// 93, nvte_cast_transpose_dbias_d{gelu,silu,relu,qgelu,srelu}:118/144/170/196/222; normalization.h
// nvte_layernorm_fwd:44, nvte_rmsnorm_fwd:107; activation.h nvte_{gelu,silu,relu,qgelu,srelu}:54-138,
// nvte_{glu,geglu,swiglu}:288/311/322, nvte_clamped_swiglu(_v2):361/383, nvte_{reglu,qgeglu,sreglu}:
// 447/458/469; hadamard_transform.h nvte_hadamard_transform_cast_fusion_columnwise:59,
// nvte_quantize_with_hadamard_transform:74, nvte_group_hadamard_transform_cast_fusion_columnwise:135,
// nvte_group_hadamard_transform_cast_fusion:154. Not interposed: the NVTEGroupedTensor casts
// (nvte_group_quantize, ..._graph_safe), the partial casts of FP8 primary weights, the gated
// gradients' casts (nvte_d*glu_cast_transpose); a GEMM operand they wrote is `cast_uncovered`.
#include <stdexcept>
#include <string>

#include "fp8scope/hook/call_guard.h"
#include "fp8scope/hook/hook_runtime.h"
#include "fp8scope/hook/te_api.h"
#include "fp8scope/hook/te_tensors.h"

using fp8scope::Activation;
using fp8scope::CastSource;
using fp8scope::hook::CallGuard;
using fp8scope::hook::HookRuntime;
using fp8scope::hook::TeCastCall;
namespace te = fp8scope::hook::te;

namespace {

// The definition below the hook; a process that calls one must have TE loaded, so its absence is
// TE's kind of error (a C++ exception, as NVTE_ERROR throws).
template <class F>
F real_entry(const char* name) {
  auto f = reinterpret_cast<F>(te::real_entry(name));
  if (f == nullptr) throw std::runtime_error(std::string("fp8scope hook: ") + name + ": no Transformer Engine below the hook");
  return f;
}

// After the real call: the casts to the hook, when this call is the outermost and the hook is on.
template <class Casts>
void observe(const CallGuard& guard, Casts casts) {
  if (!guard.observe()) return;
  HookRuntime* hook = HookRuntime::get();
  if (hook == nullptr) return;
  try {
    casts(*hook);
  } catch (...) {  // nothing reaches the caller
  }
}

// The workspace of a call that takes one: empty on the call that only sizes it (TE's convention).
bool sizing_call(te::Tensor workspace) { return te::data_of(te::api(), workspace) == nullptr; }

TeCastCall cast_of(const char* entry, CastSource source, te::Tensor in, te::Tensor out, te::Stream stream) {
  TeCastCall c;
  c.entry = entry;
  c.source = source;
  c.input = in;
  c.output = out;
  c.stream = stream;
  return c;
}

void unary(const char* entry, te::Tensor in, te::Tensor out, te::Stream stream, HookRuntime& hook) {
  hook.observe_cast(cast_of(entry, CastSource::kInput, in, out, stream));
}

void activation(const char* entry, Activation a, te::Tensor in, te::Tensor out, te::Stream stream, HookRuntime& hook,
                float limit = 0, float alpha = 0, float linear_offset = 0) {
  TeCastCall c = cast_of(entry, CastSource::kActivation, in, out, stream);
  c.activation = a;
  c.limit = limit;
  c.alpha = alpha;
  c.linear_offset = linear_offset;
  hook.observe_cast(c);
}

void dactivation(const char* entry, Activation a, te::Tensor grad, te::Tensor act_input, te::Tensor out,
                 te::Stream stream, HookRuntime& hook) {
  TeCastCall c = cast_of(entry, CastSource::kDactivation, grad, out, stream);
  c.activation = a;
  c.activation_input = act_input;
  hook.observe_cast(c);
}

// The outputs of a split input (the grouped casts): output i holds rows
// [sum(split[0..i)), ... + split[i]) of the input.
void splits(const char* entry, CastSource source, te::Tensor in, te::Tensor* outs, const size_t* split, size_t n,
            te::Tensor matrix, te::QuantConfig config, te::Stream stream, HookRuntime& hook) {
  std::uint64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    TeCastCall c = cast_of(entry, source, in, outs[i], stream);
    c.matrix = matrix;
    c.config = config;
    c.row_offset = offset;
    c.split_rows = split[i];
    offset += split[i];
    if (split[i] != 0) hook.observe_cast(c);
  }
}

}  // namespace

#define FP8SCOPE_TE_EXPORT extern "C" __attribute__((visibility("default")))

// ---- cast.h ---------------------------------------------------------------------------------------

FP8SCOPE_TE_EXPORT void nvte_quantize(te::Tensor in, te::Tensor out, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_quantize)>("nvte_quantize");
  CallGuard guard;
  real(in, out, stream);
  observe(guard, [&](HookRuntime& h) { unary("nvte_quantize", in, out, stream, h); });
}

FP8SCOPE_TE_EXPORT void nvte_quantize_noop(te::Tensor in, te::Tensor out, te::Tensor noop, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_quantize_noop)>("nvte_quantize_noop");
  CallGuard guard;
  real(in, out, noop, stream);
  observe(guard, [&](HookRuntime& h) {
    TeCastCall c = cast_of("nvte_quantize_noop", CastSource::kInput, in, out, stream);
    c.noop = noop;
    h.observe_cast(c);
  });
}

FP8SCOPE_TE_EXPORT void nvte_quantize_v2(te::Tensor in, te::Tensor out, te::QuantConfig config, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_quantize_v2)>("nvte_quantize_v2");
  CallGuard guard;
  real(in, out, config, stream);
  observe(guard, [&](HookRuntime& h) {
    TeCastCall c = cast_of("nvte_quantize_v2", CastSource::kInput, in, out, stream);
    c.config = config;
    h.observe_cast(c);
  });
}

FP8SCOPE_TE_EXPORT void nvte_quantize_dbias(te::Tensor in, te::Tensor out, te::Tensor dbias, te::Tensor workspace,
                                            te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_quantize_dbias)>("nvte_quantize_dbias");
  CallGuard guard;
  real(in, out, dbias, workspace, stream);
  observe(guard, [&](HookRuntime& h) {
    if (!sizing_call(workspace)) unary("nvte_quantize_dbias", in, out, stream, h);
  });
}

#define FP8SCOPE_TE_DBIAS_DACT(name, act)                                                                          \
  FP8SCOPE_TE_EXPORT void name(te::Tensor grad, te::Tensor act_input, te::Tensor out, te::Tensor dbias,           \
                               te::Tensor workspace, te::Stream stream) {                                         \
    static const auto real = real_entry<decltype(&name)>(#name);                                                   \
    CallGuard guard;                                                                                               \
    real(grad, act_input, out, dbias, workspace, stream);                                                         \
    observe(guard, [&](HookRuntime& h) {                                                                           \
      if (!sizing_call(workspace)) dactivation(#name, Activation::act, grad, act_input, out, stream, h);           \
    });                                                                                                            \
  }
FP8SCOPE_TE_DBIAS_DACT(nvte_quantize_dbias_dgelu, kGelu)
FP8SCOPE_TE_DBIAS_DACT(nvte_quantize_dbias_dsilu, kSilu)
FP8SCOPE_TE_DBIAS_DACT(nvte_quantize_dbias_drelu, kRelu)
FP8SCOPE_TE_DBIAS_DACT(nvte_quantize_dbias_dqgelu, kQgelu)
FP8SCOPE_TE_DBIAS_DACT(nvte_quantize_dbias_dsrelu, kSrelu)

FP8SCOPE_TE_EXPORT void nvte_multi_tensor_quantize(const te::Tensor* ins, te::Tensor* outs, te::QuantConfig config,
                                                   const size_t n, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_multi_tensor_quantize)>("nvte_multi_tensor_quantize");
  CallGuard guard;
  real(ins, outs, config, n, stream);
  observe(guard, [&](HookRuntime& h) {
    for (size_t i = 0; i < n; ++i) {
      TeCastCall c = cast_of("nvte_multi_tensor_quantize", CastSource::kInput, ins[i], outs[i], stream);
      c.config = config;
      h.observe_cast(c);
    }
  });
}

FP8SCOPE_TE_EXPORT void nvte_group_nvfp4_quantize_with_amax(te::Tensor in, te::Tensor* outs, const size_t* split,
                                                            size_t n, te::QuantConfig config, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_group_nvfp4_quantize_with_amax)>("nvte_group_nvfp4_quantize_with_amax");
  CallGuard guard;
  real(in, outs, split, n, config, stream);
  observe(guard, [&](HookRuntime& h) {
    splits("nvte_group_nvfp4_quantize_with_amax", CastSource::kInput, in, outs, split, n, nullptr, config, stream, h);
  });
}

// ---- transpose.h: per-tensor FP8 casts with their transposed copy ---------------------------------

FP8SCOPE_TE_EXPORT void nvte_cast_transpose(te::Tensor in, te::Tensor out, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_cast_transpose)>("nvte_cast_transpose");
  CallGuard guard;
  real(in, out, stream);
  observe(guard, [&](HookRuntime& h) { unary("nvte_cast_transpose", in, out, stream, h); });
}

FP8SCOPE_TE_EXPORT void nvte_cast_transpose_dbias(te::Tensor in, te::Tensor out, te::Tensor dbias, te::Tensor workspace,
                                                  te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_cast_transpose_dbias)>("nvte_cast_transpose_dbias");
  CallGuard guard;
  real(in, out, dbias, workspace, stream);
  observe(guard, [&](HookRuntime& h) {
    if (!sizing_call(workspace)) unary("nvte_cast_transpose_dbias", in, out, stream, h);
  });
}

FP8SCOPE_TE_EXPORT void nvte_multi_cast_transpose(size_t n, const te::Tensor* ins, te::Tensor* outs, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_multi_cast_transpose)>("nvte_multi_cast_transpose");
  CallGuard guard;
  real(n, ins, outs, stream);
  observe(guard, [&](HookRuntime& h) {
    for (size_t i = 0; i < n; ++i) unary("nvte_multi_cast_transpose", ins[i], outs[i], stream, h);
  });
}

FP8SCOPE_TE_DBIAS_DACT(nvte_cast_transpose_dbias_dgelu, kGelu)
FP8SCOPE_TE_DBIAS_DACT(nvte_cast_transpose_dbias_dsilu, kSilu)
FP8SCOPE_TE_DBIAS_DACT(nvte_cast_transpose_dbias_drelu, kRelu)
FP8SCOPE_TE_DBIAS_DACT(nvte_cast_transpose_dbias_dqgelu, kQgelu)
FP8SCOPE_TE_DBIAS_DACT(nvte_cast_transpose_dbias_dsrelu, kSrelu)

// ---- normalization.h: a norm whose output is quantized ------------------------------------------

FP8SCOPE_TE_EXPORT void nvte_layernorm_fwd(te::Tensor x, te::Tensor gamma, te::Tensor beta, const float epsilon,
                                           te::Tensor z, te::Tensor mu, te::Tensor rsigma, te::Tensor workspace,
                                           const int sm_count, const bool zero_centered_gamma, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_layernorm_fwd)>("nvte_layernorm_fwd");
  CallGuard guard;
  real(x, gamma, beta, epsilon, z, mu, rsigma, workspace, sm_count, zero_centered_gamma, stream);
  observe(guard, [&](HookRuntime& h) {
    if (sizing_call(workspace)) return;
    TeCastCall c = cast_of("nvte_layernorm_fwd", CastSource::kLayernorm, x, z, stream);
    c.gamma = gamma;
    c.beta = beta;
    c.mu = mu;
    c.rsigma = rsigma;
    c.epsilon = epsilon;
    c.zero_centered_gamma = zero_centered_gamma;
    h.observe_cast(c);
  });
}

FP8SCOPE_TE_EXPORT void nvte_rmsnorm_fwd(te::Tensor x, te::Tensor gamma, const float epsilon, te::Tensor z,
                                         te::Tensor rsigma, te::Tensor workspace, const int sm_count,
                                         const bool zero_centered_gamma, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_rmsnorm_fwd)>("nvte_rmsnorm_fwd");
  CallGuard guard;
  real(x, gamma, epsilon, z, rsigma, workspace, sm_count, zero_centered_gamma, stream);
  observe(guard, [&](HookRuntime& h) {
    if (sizing_call(workspace)) return;
    TeCastCall c = cast_of("nvte_rmsnorm_fwd", CastSource::kRmsnorm, x, z, stream);
    c.gamma = gamma;
    c.rsigma = rsigma;
    c.epsilon = epsilon;
    c.zero_centered_gamma = zero_centered_gamma;
    h.observe_cast(c);
  });
}

// ---- activation.h: an activation whose output is quantized --------------------------------------

#define FP8SCOPE_TE_ACTIVATION(name, act)                                                  \
  FP8SCOPE_TE_EXPORT void name(te::Tensor in, te::Tensor out, te::Stream stream) {         \
    static const auto real = real_entry<decltype(&name)>(#name);                           \
    CallGuard guard;                                                                       \
    real(in, out, stream);                                                                 \
    observe(guard, [&](HookRuntime& h) { activation(#name, Activation::act, in, out, stream, h); }); \
  }
FP8SCOPE_TE_ACTIVATION(nvte_gelu, kGelu)
FP8SCOPE_TE_ACTIVATION(nvte_silu, kSilu)
FP8SCOPE_TE_ACTIVATION(nvte_relu, kRelu)
FP8SCOPE_TE_ACTIVATION(nvte_qgelu, kQgelu)
FP8SCOPE_TE_ACTIVATION(nvte_srelu, kSrelu)
FP8SCOPE_TE_ACTIVATION(nvte_glu, kGlu)
FP8SCOPE_TE_ACTIVATION(nvte_geglu, kGeglu)
FP8SCOPE_TE_ACTIVATION(nvte_swiglu, kSwiglu)
FP8SCOPE_TE_ACTIVATION(nvte_reglu, kReglu)
FP8SCOPE_TE_ACTIVATION(nvte_qgeglu, kQgeglu)
FP8SCOPE_TE_ACTIVATION(nvte_sreglu, kSreglu)

// The first version keeps the linear half's offset at 1 (activation/swiglu.cu:65-66).
FP8SCOPE_TE_EXPORT void nvte_clamped_swiglu(te::Tensor in, te::Tensor out, float limit, float alpha, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_clamped_swiglu)>("nvte_clamped_swiglu");
  CallGuard guard;
  real(in, out, limit, alpha, stream);
  observe(guard, [&](HookRuntime& h) {
    activation("nvte_clamped_swiglu", Activation::kClampedSwiglu, in, out, stream, h, limit, alpha, 1.0f);
  });
}

FP8SCOPE_TE_EXPORT void nvte_clamped_swiglu_v2(te::Tensor in, te::Tensor out, float limit, float alpha,
                                               float linear_offset, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_clamped_swiglu_v2)>("nvte_clamped_swiglu_v2");
  CallGuard guard;
  real(in, out, limit, alpha, linear_offset, stream);
  observe(guard, [&](HookRuntime& h) {
    activation("nvte_clamped_swiglu_v2", Activation::kClampedSwiglu, in, out, stream, h, limit, alpha, linear_offset);
  });
}

// ---- hadamard_transform.h: NVFP4 with the random Hadamard transform of the column-wise copy -------

FP8SCOPE_TE_EXPORT void nvte_quantize_with_hadamard_transform(te::Tensor in, te::Tensor out, te::Tensor matrix,
                                                              te::QuantConfig config, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_quantize_with_hadamard_transform)>("nvte_quantize_with_hadamard_transform");
  CallGuard guard;
  real(in, out, matrix, config, stream);
  observe(guard, [&](HookRuntime& h) {
    TeCastCall c = cast_of("nvte_quantize_with_hadamard_transform", CastSource::kHadamard, in, out, stream);
    c.matrix = matrix;
    c.config = config;
    h.observe_cast(c);
  });
}

FP8SCOPE_TE_EXPORT void nvte_hadamard_transform_cast_fusion_columnwise(te::Tensor in, te::Tensor out, te::Tensor matrix,
                                                                       te::QuantConfig config, te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_hadamard_transform_cast_fusion_columnwise)>(
      "nvte_hadamard_transform_cast_fusion_columnwise");
  CallGuard guard;
  real(in, out, matrix, config, stream);
  observe(guard, [&](HookRuntime& h) {
    TeCastCall c = cast_of("nvte_hadamard_transform_cast_fusion_columnwise", CastSource::kHadamard, in, out, stream);
    c.matrix = matrix;
    c.config = config;
    h.observe_cast(c);
  });
}

FP8SCOPE_TE_EXPORT void nvte_group_hadamard_transform_cast_fusion_columnwise(te::Tensor in, te::Tensor* outs,
                                                                             te::Tensor matrix, const size_t* split,
                                                                             size_t n, te::QuantConfig config,
                                                                             te::Stream stream) {
  static const auto real = real_entry<decltype(&nvte_group_hadamard_transform_cast_fusion_columnwise)>(
      "nvte_group_hadamard_transform_cast_fusion_columnwise");
  CallGuard guard;
  real(in, outs, matrix, split, n, config, stream);
  observe(guard, [&](HookRuntime& h) {
    splits("nvte_group_hadamard_transform_cast_fusion_columnwise", CastSource::kHadamard, in, outs, split, n, matrix,
           config, stream, h);
  });
}

FP8SCOPE_TE_EXPORT void nvte_group_hadamard_transform_cast_fusion(te::Tensor in, te::Tensor* outs, te::Tensor matrix,
                                                                  const size_t* split, size_t n, te::QuantConfig config,
                                                                  te::Tensor workspace, te::Stream stream) {
  static const auto real =
      real_entry<decltype(&nvte_group_hadamard_transform_cast_fusion)>("nvte_group_hadamard_transform_cast_fusion");
  CallGuard guard;
  real(in, outs, matrix, split, n, config, workspace, stream);
  observe(guard, [&](HookRuntime& h) {
    splits("nvte_group_hadamard_transform_cast_fusion", CastSource::kHadamard, in, outs, split, n, matrix, config,
           stream, h);
  });
}
