// The most aggressive recipe each GEMM of a run can take, from its operands' what-ifs: NVFP4, then
// MXFP8, then per-tensor FP8 (current scaling), else BF16. A recipe holds an operand while its
// median underflow, SQNR and 1-cosine stay short of the advice's level of concern (FP4's levels
// for NVFP4: advice_thresholds()); a GEMM takes a recipe that holds every operand it sampled. The
// NVFP4 training papers keep roughly 15% of layers in higher precision: the share of GEMMs ready
// for FP4 says how close a run is to that.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fp8scope/insight/run_records.h"

namespace fp8scope::insight {

inline constexpr const char* kLadderRecipes[] = {"nvfp4", "mxfp8", "tensor_current"};

struct RungEvidence {
  std::string recipe;
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
  std::string recipe;  // the first of kLadderRecipes holding every operand, or "bf16"
  std::string evidence;  // one sentence: what holds, and what kept it off the rung above
  std::vector<OperandRungs> operands;
};

struct RecipeLadder {
  std::vector<GemmRecipe> gemms;  // every GEMM with an operand sampled under a ladder recipe
  std::size_t fp4_ready = 0;      // GEMMs whose recipe is nvfp4
  double fp4_share() const { return gemms.empty() ? 0.0 : static_cast<double>(fp4_ready) / static_cast<double>(gemms.size()); }
};

// The what-ifs come from the run's own high-precision captures, or from the baseline's same
// tensors where the run captured codes only (an FP8 run).
RecipeLadder recipe_ladder(const RunRecords& run, const RunRecords* baseline = nullptr);

}  // namespace fp8scope::insight
