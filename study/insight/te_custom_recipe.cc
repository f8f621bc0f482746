#include "fp8scope/insight/te_custom_recipe.h"

#include <map>
#include <set>

#include "fp8scope/insight/advice_formats.h"
#include "fp8scope/kernels/recipe.h"

namespace fp8scope::insight {
namespace {

Operand operand_of(const TeCopies& c) {
  return std::string(c.operand) == "x" ? Operand::kX : (std::string(c.operand) == "w" ? Operand::kW : Operand::kDy);
}

std::string python_bool(bool b) { return b ? "True" : "False"; }

// The Python expression of one tensor type's quantizer under a recipe the ladder names. NVFP4's
// options come from fp8scope's recipe table (recipe.cc), as the NVFP4Quantizer arguments TE's
// NVFP4BlockScaling gives them (pytorch/tensor/nvfp4_tensor.py:142-158; pytorch/custom_recipes/
// quantizer_factories.py nvfp4_factory).
std::string quantizer(const std::string& recipe, const TeCopies& copies) {
  const std::optional<RecipeKind> kind = recipe_kind_from_name(recipe);
  // BF16, and (unreachable: the ladder names none, te_custom_recipe_test) a recipe without a TE
  // quantizer here: high precision.
  if (!kind) return "IdentityQuantizer()";
  const Recipe r = default_recipe(*kind);
  const bool nvfp4 = r.fp4() && r.block_cols == 16;
  if (!nvfp4 && *kind != RecipeKind::kTensorCurrent && *kind != RecipeKind::kMxfp8) return "IdentityQuantizer()";
  const Operand op = operand_of(copies);
  if (nvfp4) {
    const bool four_over_six = r.four_over_six_for(op);
    return "NVFP4Quantizer(fp4_dtype=DType.kFloat4E2M1, with_rht=" + python_bool(r.transforms(op)) +
           ", with_post_rht_amax=" + python_bool(r.transforms(op)) +
           ", with_2d_quantization=" + python_bool(r.block_rows_for(op) > 1) +
           ", stochastic_rounding=" + python_bool(r.stochastic_for(op)) +
           ", row_scaled_nvfp4=" + python_bool(r.row_scaled_for(op)) + ", nvfp4_use_4over6=" + python_bool(four_over_six) +
           ", nvfp4_e4m3_max=" + (four_over_six ? "256" : "448") + ")";
  }
  const std::string fp8_dtype = r.format_for(op) == CastFormat::kE5M2 ? "DType.kFloat8E5M2" : "DType.kFloat8E4M3";
  if (r.kind == RecipeKind::kMxfp8) return "MXFP8Quantizer(fp8_dtype=" + fp8_dtype + ")";
  // Per-tensor current scaling (Float8CurrentScaling, quantizer_factories.py current_scaling_factory).
  return "Float8CurrentScalingQuantizer(fp8_dtype=" + fp8_dtype + ", device=torch.device(\"cuda\"))";
}

}  // namespace

void write_te_custom_recipe(const RecipeLadder& ladder, const std::string& run, std::ostream& out) {
  std::map<std::string, std::map<std::string, std::string>> plan;  // module -> gemm -> recipe
  std::map<std::string, std::size_t> takes;
  for (const GemmRecipe& g : ladder.gemms) {
    plan[module_name(g.layer)][g.gemm] = g.recipe;
    ++takes[g.recipe];
  }
  std::string fallback = "bf16";
  for (const auto& [recipe, n] : takes) {
    if (n > takes[fallback]) fallback = recipe;
  }
  std::set<std::string> recipes = {fallback};
  for (const auto& [module, gemms] : plan) {
    for (const auto& [gemm, recipe] : gemms) recipes.insert(recipe);
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
      << "FALLBACK = \"" << fallback << "\"\n\n"
      << "# layer -> GEMM -> recipe\n"
      << "GEMM_RECIPES = {\n";
  for (const auto& [module, gemms] : plan) {
    out << "    \"" << module << "\": {";
    bool first = true;
    for (const auto& [gemm, recipe] : gemms) {
      out << (first ? "" : ", ") << "\"" << gemm << "\": \"" << recipe << "\"";
      first = false;
    }
    out << "},\n";
  }
  out << "}\n\n"
      << "# The GEMMs that read each tensor's row-wise and column-wise copy (TE: cpp_extensions/gemm.py:213-223).\n"
      << "COPIES = {";
  for (const TeCopies& c : kTeCopies) {
    out << "\"" << c.tensor_type << "\": (\"" << c.rowwise_gemm << "\", \"" << c.columnwise_gemm << "\"), ";
  }
  out << "}\n\n\n"
      << "def quantizer(recipe, tensor_type):\n";
  for (const std::string& recipe : recipes) {
    out << "    if recipe == \"" << recipe << "\":\n";
    for (const TeCopies& c : kTeCopies) {
      out << "        if tensor_type == \"" << c.tensor_type << "\":\n            return " << quantizer(recipe, c) << "\n";
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

}  // namespace fp8scope::insight
