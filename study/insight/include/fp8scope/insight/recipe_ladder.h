// The most aggressive recipe each GEMM of a run can take, from its operands' what-ifs: NVFP4, then
// NVFP4 with the random Hadamard transform (wgrad only: TE transforms just the column-wise copies,
// which wgrad reads), then MXFP8, then per-tensor FP8 (current scaling), else BF16. A recipe holds
// an operand while its median underflow, SQNR and 1-cosine stay short of the advice's level of
// concern (FP4's levels for NVFP4: advice_thresholds()); a GEMM takes a recipe that holds every
// operand it sampled. A rung none of a GEMM's operands was sampled under is passed over. The
// NVFP4 training papers keep roughly 15% of layers in higher precision: the share of GEMMs ready
// for FP4 says how close a run is to that. GEMMs of one layer may take different rungs: TE runs
// that as hybrid quantization (te/custom_recipe.h).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

struct LadderRung {
  RecipeKind recipe;
  const char* only_gemm;  // the one GEMM the rung applies to, or nullptr for every GEMM
  bool applies(const std::string& gemm) const { return only_gemm == nullptr || gemm == only_gemm; }
};
inline constexpr LadderRung kLadderRungs[] = {{RecipeKind::kNvfp4, nullptr},
                                             {RecipeKind::kNvfp4Rht, "wgrad"},
                                             {RecipeKind::kMxfp8, nullptr},
                                             {RecipeKind::kTensorCurrent, nullptr}};

struct RungEvidence {
  RecipeKind recipe = RecipeKind::kTensorCurrent;
  double underflow = 0, sqnr_db = 0, one_minus_cosine = 0;  // medians over the sampled steps
  bool holds = false;
  std::string failed_on;  // the first signal at its level of concern, when it does not hold
};

struct OperandRungs {
  std::string operand;
  std::vector<RungEvidence> rungs;  // the ladder's recipes this operand was sampled under, in ladder order
};

struct GemmRecipe {
  std::string layer, gemm;
  std::optional<RecipeKind> recipe;  // the first of kLadderRungs holding every operand; none: BF16
  std::string evidence;  // one sentence: what holds, and what kept it off the rung above
  std::vector<OperandRungs> operands;
};

struct RecipeLadder {
  std::vector<GemmRecipe> gemms;  // every GEMM with an operand sampled under a ladder recipe
  std::size_t fp4_ready = 0;      // GEMMs whose recipe casts to FP4 (nvfp4, nvfp4_rht)
  double fp4_share() const { return gemms.empty() ? 0.0 : static_cast<double>(fp4_ready) / static_cast<double>(gemms.size()); }
};

// The what-ifs come from the run's own high-precision captures, or from the baseline's same
// tensors where the run captured codes only (an FP8 run).
RecipeLadder recipe_ladder(const RunRecords& run, const RunRecords* baseline = nullptr);

}  // namespace fp8scope::insight
