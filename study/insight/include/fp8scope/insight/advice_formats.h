// Advice written for the tools that act on it: a table for people, a Transformer Engine debug-API
// YAML (nvdlfw_inspect: DisableQuantizationGEMM, DisableQuantizationLayer, PerTensorScaling with layer regexes), a
// Megatron-style list of the transformer layers to keep in BF16, and JSON.
#pragma once

#include <ostream>
#include <string>

#include "fp8scope/insight/advice.h"
#include "fp8scope/te/debug_config.h"

namespace fp8scope::insight {

void write_advice_table(const RunAdvice& advice, std::ostream& out, std::size_t max_rows = 0);
// The TE debug API's features fp8scope writes only when asked, because TE's main branch lacks them.
struct TeYamlOptions {
  bool autoswitch_gemm = false;  // TE PR #2883 (transformer_engine/debug/features/autoswitch_gemm.py)
};
// An nvdlfw_inspect config with the feature names of TE's main branch (checked at d0067d0:
// DisableQuantizationGEMM and DisableQuantizationLayer, whose old DisableFP8* names TE keeps only
// as deprecated aliases, transformer_engine/debug/features/disable_fp8_gemm.py:7).
te::DebugConfig te_debug_config(const RunAdvice& advice, const TeYamlOptions& options = {});
void write_te_debug_yaml(const RunAdvice& advice, std::ostream& out, const TeYamlOptions& options = {});
void write_megatron_layers(const RunAdvice& advice, std::ostream& out);
// What TE's CustomRecipe runs (te/custom_recipe.h): each sampled GEMM's recipe, and the fallback
// for every GEMM not listed.
struct TeRecipePlan {
  std::vector<GemmRecipe> gemms;
  std::optional<RecipeKind> fallback;  // none: BF16
};
// The table's advice as that plan, so the file and the table say the same: a GEMM takes the job's
// own recipe where the table keeps its tensors as they are (FP8 current scaling in a BF16 run,
// whose "keep FP8" says FP8 holds them), current scaling where delayed scaling lags, the finer
// recipe, or BF16, the most cautious of its operands'. GEMMs not sampled keep the recipe the job
// already runs (BF16 for a BF16 run): a recipe never goes where no sample has been.
TeRecipePlan te_recipe_plan(const RunAdvice& advice);
void write_te_recipe(const TeRecipePlan& plan, const std::string& run, std::ostream& out);
std::string advice_json(const RunAdvice& advice);

// The layer name TE would know: fp8scope's label without its "#<ordinal>" suffix.
std::string module_name(const std::string& layer_label);
// The transformer layer number in a module name (the first ".<digits>." segment), or -1.
int transformer_layer_index(const std::string& module);

}  // namespace fp8scope::insight
