// Transformer Engine's names for what fp8scope measures, declared once for every door to TE (the
// debug-API configs read and written, the statistics log lines, the CustomRecipe module). Each
// list is from TE's source at d0067d0 (transformer_engine/...) and nvidia-dlfw-inspect at dc19d10:
//  - the tensors TE's debug features name, and the GEMMs that read each one's row-wise and
//    column-wise copies (pytorch/debug_quantization.py:29-36; pytorch/cpp_extensions/gemm.py:
//    213-223), with the role a CustomRecipe's qfactory sees for it (pytorch/quantization.py:56-87);
//  - the GEMM outputs LogTensorStats can log (debug_quantization.py:29-36);
//  - each recipe: the prefix of its LogFp8TensorStats names, found by substring in this order
//    (debug/features/log_fp8_tensor_stats.py:36, get_recipe_from_stat :227-234), whether its
//    stats have _columnwise variants (:204-208), the TE quantizer class that casts it;
//  - the debug features fp8scope reads, and those that change what the job computes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "fp8scope/kernels/block_dynamic_range.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/recipe_kind.h"

namespace fp8scope::te {

struct TensorName {
  const char* name;         // the debug features' tensor: "activation", "weight", "gradient"
  const char* tensor_type;  // a CustomRecipe role's tensor_type: "input", "weight", "grad_output"
  Operand operand;
  GemmRole rowwise_gemm, columnwise_gemm;  // the GEMM that reads each copy
};
inline constexpr TensorName kTensors[] = {
    {"activation", "input", Operand::kX, GemmRole::kFprop, GemmRole::kWgrad},
    {"weight", "weight", Operand::kW, GemmRole::kFprop, GemmRole::kDgrad},
    {"gradient", "grad_output", Operand::kDy, GemmRole::kDgrad, GemmRole::kWgrad},
};

constexpr const TensorName& tensor_of(Operand o) {
  for (const TensorName& t : kTensors) {
    if (t.operand == o) return t;
  }
  return kTensors[0];
}
constexpr const TensorName* tensor_named(std::string_view name) {
  for (const TensorName& t : kTensors) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

// The GEMM outputs, by the GEMM that writes them.
struct OutputName {
  const char* name;
  GemmRole gemm;
};
inline constexpr OutputName kOutputs[] = {{"output", GemmRole::kFprop}, {"dgrad", GemmRole::kDgrad}, {"wgrad", GemmRole::kWgrad}};

constexpr const OutputName* output_named(std::string_view name) {
  for (const OutputName& o : kOutputs) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

// A GEMM output TE logs under no name of its own: in a debug run LayerNormMLP's fc2 dgrad GEMM
// writes through fc1's grad-input quantizer (pytorch/module/layernorm_mlp.py:1250-1255), which
// fc1's own dgrad GEMM uses too (:1555). TE combines the two into "<module>.fc1" "dgrad" and
// never logs "<module>.fc2" "dgrad"; fp8scope writes fc1's own output there (the combination
// would depend on which of the two samples a reader meets first).
struct UnloggedOutput {
  std::string_view gemm_suffix;
  GemmRole gemm;
};
inline constexpr UnloggedOutput kUnloggedOutputs[] = {{".fc2", GemmRole::kDgrad}};

// TE's name of the output of GEMM `gemm` of `module` ("output", "dgrad", "wgrad"); null where TE
// logs none.
constexpr const char* logged_output(std::string_view module, GemmRole gemm) {
  for (const UnloggedOutput& u : kUnloggedOutputs) {
    if (u.gemm == gemm && module.ends_with(u.gemm_suffix)) return nullptr;
  }
  for (const OutputName& o : kOutputs) {
    if (o.gemm == gemm) return o.name;
  }
  return nullptr;  // a GEMM whose role is unknown
}

// LogTensorStats' max_blockwise_dynamic_range of one block shape as the log names it, before any
// orientation suffix (stats_computation.py:18-26).
inline std::string block_range_stat(const BlockRange& b) {
  return "max_blockwise_dynamic_range_block_size_" + std::to_string(b.block_size) + "_dims_" + std::to_string(b.dims);
}

// The debug feature whose stats name a recipe's what-ifs.
enum class StatsFeature { kFp8, kNvfp4 };

// fp8scope's recipes as TE names them. Float8BlockScaling casts activations and gradients 1x128 and
// weights 128x128: two of fp8scope's recipes share its prefix, each for its operands.
struct RecipeName {
  RecipeKind kind;
  const char* prefix;   // of the stats' names: "<prefix>_underflows%" (no trailing "_")
  StatsFeature feature;
  bool weights, inputs;    // the operands this recipe of fp8scope's stands for TE's (W; X and Dy)
  bool columnwise_stats;   // TE defines "<prefix>_<stat>_columnwise"
  const char* quantizer;   // the TE class that casts it (pytorch/tensor/*.py)
};
inline constexpr RecipeName kRecipes[] = {
    {RecipeKind::kTensorDelayed, "fp8_delayed_scaling", StatsFeature::kFp8, true, true, false, "Float8Quantizer"},
    {RecipeKind::kTensorCurrent, "fp8_current_scaling", StatsFeature::kFp8, true, true, false,
     "Float8CurrentScalingQuantizer"},
    {RecipeKind::kMxfp8, "mxfp8", StatsFeature::kFp8, true, true, true, "MXFP8Quantizer"},
    {RecipeKind::kBlock1x128, "fp8_block_scaling", StatsFeature::kFp8, false, true, true, "Float8BlockQuantizer"},
    {RecipeKind::kBlock128x128, "fp8_block_scaling", StatsFeature::kFp8, true, false, true, "Float8BlockQuantizer"},
    {RecipeKind::kNvfp4, "nvfp4", StatsFeature::kNvfp4, true, true, false, "NVFP4Quantizer"},
};

// The row that names recipe `kind` for operand `o`; null when TE has no name for it.
constexpr const RecipeName* recipe_for(RecipeKind kind, Operand o) {
  for (const RecipeName& r : kRecipes) {
    if (r.kind == kind && (o == Operand::kW ? r.weights : r.inputs)) return &r;
  }
  return nullptr;
}
// The row of a LogFp8TensorStats stat's recipe prefix, as TE finds it: the first prefix, in table
// order, the name contains; of the rows with that prefix, the one for operand `o`.
constexpr const RecipeName* fp8_recipe_in_stat(std::string_view stat, Operand o) {
  for (const RecipeName& r : kRecipes) {
    if (r.feature != StatsFeature::kFp8 || stat.find(r.prefix) == std::string_view::npos) continue;
    for (const RecipeName& same : kRecipes) {
      if (std::string_view(same.prefix) == r.prefix && (o == Operand::kW ? same.weights : same.inputs)) return &same;
    }
    return nullptr;
  }
  return nullptr;
}

// The debug features fp8scope knows, with the namespace they are registered in: TE's
// ("transformer_engine") or nvdlfw_inspect's own base namespace, whose features sit directly under
// a section (nvdlfw_inspect/config_manager.py:186-222).
enum class FeatureRole {
  kLogTensorStats,      // the high-precision tensor's statistics
  kLogFp8TensorStats,   // a quantization's, the job's own or a recipe's what-if
  kLogNvfp4TensorStats,
  kChangesRun,          // fp8scope observes only: not applied
  kNotCalledByTe,       // registered, but TE's modules never call it: not applied
};
struct FeatureName {
  const char* name;
  bool te_namespace;  // under `transformer_engine:`, else nvdlfw's base namespace
  FeatureRole role;
  const char* changes;  // kChangesRun: what it would change; kNotCalledByTe: why TE never calls it
};
inline constexpr FeatureName kFeatures[] = {
    {"LogTensorStats", true, FeatureRole::kLogTensorStats, ""},
    {"LogFp8TensorStats", true, FeatureRole::kLogFp8TensorStats, ""},
    {"LogNvfp4TensorStats", true, FeatureRole::kLogNvfp4TensorStats, ""},
    // nvdlfw's own, directly under a section: TE's modules inspect tensors through
    // debug_api.transformer_engine.inspect_tensor (transformer_engine/debug/pytorch/
    // debug_quantization.py), which runs TE's namespace's features only.
    {"LogTensorStats", false, FeatureRole::kNotCalledByTe,
     "nvdlfw_inspect's own LogTensorStats: TE's modules call only transformer_engine's features"},
    {"DisableQuantizationGEMM", true, FeatureRole::kChangesRun, "runs GEMMs in high precision"},
    {"DisableQuantizationLayer", true, FeatureRole::kChangesRun, "runs the layer in high precision"},
    {"DisableFP8GEMM", true, FeatureRole::kChangesRun,
     "runs GEMMs in high precision (TE's deprecated name of DisableQuantizationGEMM)"},
    {"DisableFP8Layer", true, FeatureRole::kChangesRun,
     "runs the layer in high precision (TE's deprecated name of DisableQuantizationLayer)"},
    {"PerTensorScaling", true, FeatureRole::kChangesRun, "changes the job's scaling"},
    {"FakeQuant", true, FeatureRole::kChangesRun, "changes the job's numerics"},
    {"DumpTensors", true, FeatureRole::kChangesRun, "writes tensor files from the job"},
    {"AutoswitchGemm", true, FeatureRole::kChangesRun, "switches GEMMs to high precision (TE PR #2883)"},
};

constexpr const FeatureName* feature_named(std::string_view name, bool te_namespace) {
  for (const FeatureName& f : kFeatures) {
    if (name == f.name && f.te_namespace == te_namespace) return &f;
  }
  return nullptr;
}

// The name of TE's logging feature with this role ("" for the roles that log nothing).
constexpr const char* feature_name(FeatureRole role) {
  for (const FeatureName& f : kFeatures) {
    if (f.te_namespace && f.role == role) return f.name;
  }
  return "";
}

// A section's key for TE's namespace (config_manager.py:210).
inline constexpr const char* kTeNamespace = "transformer_engine";

}  // namespace fp8scope::te
