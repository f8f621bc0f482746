#include "fp8scope/insight/recipe_ladder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "advice_signals.h"

namespace fp8scope::insight {
namespace {

RungEvidence rung(RecipeKind recipe, const std::vector<RecordPoint>& points) {
  RungEvidence r;
  r.recipe = recipe;
  r.underflow = median_of(series(&points, "underflow_ratio"));
  r.sqnr_db = median_of(series(&points, "sqnr_db"));
  std::vector<double> cosine = series(&points, "cosine");
  for (double& c : cosine) c = 1.0 - c;
  r.one_minus_cosine = median_of(cosine);
  const bool fp4 = fp4_recipe(recipe);
  const std::pair<const char*, double> signals[] = {
      {"underflow_ratio", r.underflow}, {"sqnr_db", r.sqnr_db}, {"1-cosine", r.one_minus_cosine}};
  for (const auto& [signal, value] : signals) {
    if (at_least(signal, value, false, fp4) && r.failed_on.empty()) r.failed_on = signal;
  }
  r.holds = r.failed_on.empty() && std::isfinite(r.sqnr_db);
  return r;
}

// The operand's series: its own what-ifs, else the baseline's where the run captured it as codes.
const TensorRecords* what_ifs(const TensorKey& key, const TensorRecords& own, const RunRecords* baseline) {
  for (const LadderRung& rung : kLadderRungs) {
    if (own.find(rung.recipe) != nullptr) return &own;
  }
  if (baseline == nullptr) return nullptr;
  const auto it = baseline->tensors.find(key);
  return it == baseline->tensors.end() ? nullptr : &it->second;
}

const RungEvidence* find_rung(const OperandRungs& o, RecipeKind recipe) {
  for (const RungEvidence& r : o.rungs) {
    if (r.recipe == recipe) return &r;
  }
  return nullptr;
}

std::string figures(const RungEvidence& r) {
  char text[160];
  std::snprintf(text, sizeof text, "underflow %.3g, SQNR %.1f dB", r.underflow, r.sqnr_db);
  return text;
}

// The GEMM's rung and the sentence behind it.
void choose(GemmRecipe& g) {
  g.recipe.reset();
  std::string above;  // why the rung above did not hold
  for (const LadderRung& rung : kLadderRungs) {
    const RecipeKind recipe = rung.recipe;
    const bool sampled = std::any_of(g.operands.begin(), g.operands.end(),
                                     [&](const OperandRungs& o) { return find_rung(o, recipe) != nullptr; });
    if (!rung.applies(g.gemm) || !sampled) continue;
    bool holds = true;
    std::string failed;
    for (const OperandRungs& o : g.operands) {
      const RungEvidence* r = find_rung(o, recipe);
      if (r != nullptr && r->holds) continue;
      holds = false;
      if (failed.empty()) {
        failed = r == nullptr ? o.operand + " was not sampled under it"
                              : o.operand + " reaches the level of concern in " + r->failed_on + " (" + figures(*r) + ")";
      }
    }
    if (holds) {
      g.recipe = recipe;
      std::string held;
      for (const OperandRungs& o : g.operands) {
        held += (held.empty() ? "" : "; ") + o.operand + " " + figures(*find_rung(o, recipe));
      }
      g.evidence = std::string(recipe_name(recipe)) + " holds every operand (" + held + ")" + above;
      return;
    }
    above += std::string(above.empty() ? "; not " : ", not ") + recipe_name(recipe) + ": " + failed;
  }
  g.evidence = "no recipe of the ladder holds every operand" + above;
}

}  // namespace

RecipeLadder recipe_ladder(const RunRecords& run, const RunRecords* baseline) {
  std::map<std::pair<std::string, std::string>, GemmRecipe> gemms;
  for (const auto& [key, own] : run.tensors) {
    const TensorRecords* source = what_ifs(key, own, baseline);
    if (source == nullptr) continue;
    OperandRungs o;
    o.operand = key.operand;
    for (const LadderRung& r : kLadderRungs) {
      if (!r.applies(key.gemm)) continue;
      if (const std::vector<RecordPoint>* points = source->find(r.recipe)) o.rungs.push_back(rung(r.recipe, *points));
    }
    if (o.rungs.empty()) continue;
    GemmRecipe& g = gemms[{key.layer, key.gemm}];
    g.layer = key.layer;
    g.gemm = key.gemm;
    g.operands.push_back(std::move(o));
  }
  RecipeLadder ladder;
  for (auto& [at, g] : gemms) {
    choose(g);
    ladder.fp4_ready += g.recipe && fp4_recipe(*g.recipe);
    ladder.gemms.push_back(std::move(g));
  }
  return ladder;
}

}  // namespace fp8scope::insight
