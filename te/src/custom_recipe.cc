#include "fp8scope/te/custom_recipe.h"

#include <set>

#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/te/te_names.h"

namespace fp8scope::te {
namespace {

std::string python_bool(bool b) { return b ? "True" : "False"; }

// The Python expression of one tensor's quantizer under a precision the plan names. NVFP4's
// options come from fp8scope's recipe table (recipe.cc), as the NVFP4Quantizer arguments TE's
// NVFP4BlockScaling gives them (pytorch/tensor/nvfp4_tensor.py:142-158; pytorch/custom_recipes/
// quantizer_factories.py nvfp4_factory). A recipe without a quantizer here (the ladder names none:
// te_custom_recipe_test) runs in high precision.
std::string quantizer(const GemmPrecision& precision, const TensorName& tensor) {
  if (!precision) return "IdentityQuantizer()";
  const Recipe r = default_recipe(*precision);
  const Operand op = tensor.operand;
  const RecipeName* name = recipe_for(r.kind, op);
  const bool nvfp4 = r.fp4() && r.block_cols == 16;
  if (!nvfp4 && *precision != RecipeKind::kTensorCurrent && *precision != RecipeKind::kMxfp8) return "IdentityQuantizer()";
  if (nvfp4) {
    const bool four_over_six = r.four_over_six_for(op);
    return std::string(recipe_for(RecipeKind::kNvfp4, op)->quantizer) +
           "(fp4_dtype=DType.kFloat4E2M1, with_rht=" + python_bool(r.transforms(op)) +
           ", with_post_rht_amax=" + python_bool(r.transforms(op)) +
           ", with_2d_quantization=" + python_bool(r.block_rows_for(op) > 1) +
           ", stochastic_rounding=" + python_bool(r.stochastic_for(op)) +
           ", row_scaled_nvfp4=" + python_bool(r.row_scaled_for(op)) + ", nvfp4_use_4over6=" + python_bool(four_over_six) +
           ", nvfp4_e4m3_max=" +
           std::to_string(static_cast<int>(four_over_six ? kNvfp4FourOverSixScaleMax : max_value(kUE4M3))) + ")";
  }
  const std::string fp8_dtype = r.format_for(op) == CastFormat::kE5M2 ? "DType.kFloat8E5M2" : "DType.kFloat8E4M3";
  if (r.kind == RecipeKind::kMxfp8) return std::string(name->quantizer) + "(fp8_dtype=" + fp8_dtype + ")";
  // Per-tensor current scaling (Float8CurrentScaling, quantizer_factories.py current_scaling_factory).
  return std::string(name->quantizer) + "(fp8_dtype=" + fp8_dtype + ", device=torch.device(\"cuda\"))";
}

}  // namespace

std::string precision_name(const GemmPrecision& p) { return p ? recipe_name(*p) : "bf16"; }

void write_te_custom_recipe(const ModulePrecisions& modules, const GemmPrecision& fallback, const std::string& run,
                            std::ostream& out) {
  std::set<std::string> names = {precision_name(fallback)};
  std::map<std::string, GemmPrecision> by_name = {{precision_name(fallback), fallback}};
  for (const auto& [module, gemms] : modules) {
    for (const auto& [gemm, precision] : gemms) by_name[precision_name(precision)] = precision;
  }
  out << "# Transformer Engine CustomRecipe written by fp8scope advise for run " << run << ": each GEMM of each\n"
      << "# layer in the recipe its sampled operands hold (the recipe ladder), a tensor whose row-wise and\n"
      << "# column-wise copies feed GEMMs of different recipes as a HybridQuantizer (TE PR #2817).\n"
      << "#   from my_recipe import recipe\n"
      << "#   with te.autocast(enabled=True, recipe=recipe): ...\n"
      << "# role.name is the module's name= argument; layers not listed, and GEMMs not sampled, take\n"
      << "# FALLBACK. Checked against TE d0067d0 (transformer_engine/pytorch/tensor/hybrid_tensor.py,\n"
      << "# nvfp4_tensor.py, common/recipe/__init__.py CustomRecipe).\n"
      << "import torch\n"
      << "from transformer_engine.common.recipe import CustomRecipe\n"
      << "from transformer_engine.pytorch import (DType, Float8CurrentScalingQuantizer, HybridQuantizer, "
         "IdentityQuantizer,\n"
      << "                                        MXFP8Quantizer, NVFP4Quantizer)\n\n"
      << "FALLBACK = \"" << precision_name(fallback) << "\"\n\n"
      << "# layer -> GEMM -> recipe\n"
      << "GEMM_RECIPES = {\n";
  for (const auto& [module, gemms] : modules) {
    out << "    \"" << module << "\": {";
    bool first = true;
    for (const auto& [gemm, precision] : gemms) {
      out << (first ? "" : ", ") << "\"" << gemm_name(gemm) << "\": \"" << precision_name(precision) << "\"";
      first = false;
    }
    out << "},\n";
  }
  out << "}\n\n"
      << "# The GEMMs that read each tensor's row-wise and column-wise copy (TE: cpp_extensions/gemm.py:213-223).\n"
      << "COPIES = {";
  for (const TensorName& t : kTensors) {
    out << "\"" << t.tensor_type << "\": (\"" << gemm_name(t.rowwise_gemm) << "\", \"" << gemm_name(t.columnwise_gemm)
        << "\"), ";
  }
  out << "}\n\n\n"
      << "def quantizer(recipe, tensor_type):\n";
  for (const auto& [name, precision] : by_name) {
    out << "    if recipe == \"" << name << "\":\n";
    for (const TensorName& t : kTensors) {
      out << "        if tensor_type == \"" << t.tensor_type << "\":\n            return " << quantizer(precision, t) << "\n";
    }
  }
  out << "    raise ValueError(f\"fp8scope wrote no quantizer for {recipe} {tensor_type}\")\n\n\n"
      << "def qfactory(role):\n"
      << "    # TE's output and grad_input slots come without a role: no quantization there.\n"
      << "    if role is None or role.tensor_type not in COPIES:\n"
      << "        return IdentityQuantizer()\n"
      << "    gemms = GEMM_RECIPES.get(role.name, {})\n"
      << "    row, col = (gemms.get(gemm, FALLBACK) for gemm in COPIES[role.tensor_type])\n"
      << "    if row == col:\n"
      << "        return quantizer(row, role.tensor_type)\n"
      << "    return HybridQuantizer(rowwise_quantizer=quantizer(row, role.tensor_type),\n"
      << "                           columnwise_quantizer=quantizer(col, role.tensor_type))\n\n\n"
      << "recipe = CustomRecipe(qfactory=qfactory)\n";
}

}  // namespace fp8scope::te
