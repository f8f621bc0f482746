// `advise --format te-recipe` writes a Python module TE runs: loaded here against a stand-in of TE
// d0067d0's classes (tests/support/te_stub) and held to TE's rules by a checker written apart from
// fp8scope's code (tests/support/te_custom_recipe_check.py): each copy of each tensor in the recipe
// of the GEMM that reads it, HybridQuantizer where a layer's GEMMs differ, NVFP4's options as
// NVFP4BlockScaling sets them, and one scaling family per GEMM.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fp8scope/insight/advice_formats.h"
#include "fp8scope/te/custom_recipe.h"
#include "support/process.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using namespace fp8scope::insight;
using fp8scope::testing::run_process;
using fp8scope::testing::TempDir;

namespace {

// A ladder rung by name: a recipe's, or "bf16".
GemmRecipe gemm(const std::string& layer, const std::string& gemm, const std::string& recipe) {
  GemmRecipe g;
  g.layer = layer + "#0";
  g.gemm = gemm;
  g.recipe = recipe_kind_from_name(recipe);
  if (!g.recipe) REQUIRE(recipe == "bf16");
  return g;
}

// Writes the module and the plan the checker holds it to; returns the checker's result.
testing::ProcessResult check(const RecipeLadder& ladder, const std::string& fallback, TempDir& dir,
                             const std::string& edit_from = "", const std::string& edit_to = "") {
  std::ostringstream module;
  write_te_recipe(TeRecipePlan{ladder.gemms, recipe_kind_from_name(fallback)}, "run1", module);
  std::string text = module.str();
  if (!edit_from.empty()) {
    const std::size_t at = text.find(edit_from);
    REQUIRE(at != std::string::npos);
    text.replace(at, edit_from.size(), edit_to);
  }
  std::ofstream(dir.file("my_recipe.py")) << text;
  nlohmann::json plan = {{"fallback", fallback}, {"gemms", nlohmann::json::object()}};
  for (const GemmRecipe& g : ladder.gemms) plan["gemms"][g.layer.substr(0, g.layer.rfind('#'))][g.gemm] = te::precision_name(g.recipe);
  std::ofstream(dir.file("plan.json")) << plan.dump();
  return run_process({FP8SCOPE_PYTHON, std::string(FP8SCOPE_SOURCE_DIR) + "/tests/support/te_custom_recipe_check.py",
                      dir.file("my_recipe.py"), dir.file("plan.json")});
}

}  // namespace

TEST_CASE("te-recipe: each copy in its GEMM's recipe, hybrid where a layer's GEMMs differ, as TE runs it",
          "[te_recipe]") {
  RecipeLadder ladder;
  // A layer whose GEMMs take three recipes: X is NVFP4 row-wise and NVFP4 with RHT column-wise, W
  // NVFP4 row-wise and MXFP8 column-wise, Dy MXFP8 row-wise and NVFP4 with RHT column-wise.
  for (auto [g, r] : {std::pair{"fprop", "nvfp4"}, {"dgrad", "mxfp8"}, {"wgrad", "nvfp4_rht"}}) {
    ladder.gemms.push_back(gemm("decoder.0.fc1", g, r));
  }
  for (const char* g : {"fprop", "dgrad", "wgrad"}) ladder.gemms.push_back(gemm("decoder.1.fc2", g, "mxfp8"));
  ladder.gemms.push_back(gemm("decoder.2.proj", "fprop", "bf16"));            // its other GEMMs: the fallback
  ladder.gemms.push_back(gemm("decoder.3.qkv", "wgrad", "tensor_current"));  // E5M2 for the gradient
  TempDir dir;
  const testing::ProcessResult r = check(ladder, "mxfp8", dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  // The module says what it is and where it came from.
  std::ifstream in(dir.file("my_recipe.py"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("FALLBACK = \"mxfp8\"") != std::string::npos);
  CHECK(text.find("recipe = CustomRecipe(qfactory=qfactory)") != std::string::npos);
}

TEST_CASE("te-recipe: NVFP4's options become NVFP4Quantizer's arguments for the tensors TE applies them to",
          "[te_recipe]") {
  RecipeLadder ladder;
  const char* options[] = {"nvfp4_4over6", "nvfp4_sr", "nvfp4_row", "nvfp4_rht"};
  for (const char* r : options) {
    for (const char* g : {"fprop", "dgrad", "wgrad"}) ladder.gemms.push_back(gemm(std::string("layer.") + r, g, r));
  }
  TempDir dir;
  const testing::ProcessResult r = check(ladder, "nvfp4_4over6", dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("te-recipe: the checker refuses a module that feeds a GEMM the wrong copy", "[te_recipe]") {
  RecipeLadder ladder;
  for (auto [g, r] : {std::pair{"fprop", "nvfp4"}, {"dgrad", "mxfp8"}, {"wgrad", "mxfp8"}}) {
    ladder.gemms.push_back(gemm("l", g, r));
  }
  TempDir dir;
  // The weight's copies swapped: dgrad would read NVFP4 beside an MXFP8 gradient.
  const testing::ProcessResult r = check(ladder, "mxfp8", dir, "\"weight\": (\"fprop\", \"dgrad\")",
                                         "\"weight\": (\"dgrad\", \"fprop\")");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("l dgrad: its operands' copies are of different families") != std::string::npos);
}

namespace {

TensorAdvice advice(const std::string& layer, const std::string& gemm, const std::string& operand, Recommendation r,
                    RecipeKind job, bool quantized) {
  TensorAdvice t;
  t.tensor = {layer + "#0", gemm, operand};
  t.recommendation = r;
  t.what_if_recipe = job;
  t.observed_format = quantized ? &kE4M3 : nullptr;
  if (r == Recommendation::kFinerRecipe) t.finer_recipe = RecipeKind::kMxfp8;
  return t;
}

std::map<std::string, std::string> precisions(const TeRecipePlan& plan) {
  std::map<std::string, std::string> out;
  for (const GemmRecipe& g : plan.gemms) out[g.layer + " " + g.gemm] = te::precision_name(g.recipe);
  return out;
}

}  // namespace

TEST_CASE("te-recipe says what the table says: the job's recipe where kept, the fallback the job's own",
          "[te_recipe]") {
  SECTION("an MXFP8 run whose ladder would take NVFP4 everywhere, and whose table keeps it as it is") {
    RunAdvice a;
    for (const char* g : {"fprop", "dgrad", "wgrad"}) {
      for (const char* op : {"x", "w"}) a.tensors.push_back(advice("layer.0", g, op, Recommendation::kKeepFp8, RecipeKind::kMxfp8, true));
      a.ladder.gemms.push_back(gemm("layer.0", g, "nvfp4"));
    }
    // One gradient the table moves to BF16: its GEMM goes, whatever its other operand says.
    a.tensors.push_back(advice("layer.0", "dgrad", "dy", Recommendation::kFallBackToBf16, RecipeKind::kMxfp8, true));
    const TeRecipePlan plan = te_recipe_plan(a);
    CHECK(plan.fallback == RecipeKind::kMxfp8);  // layers never sampled keep the job's recipe, not nvfp4
    const std::map<std::string, std::string> want = {
        {"layer.0#0 fprop", "mxfp8"}, {"layer.0#0 dgrad", "bf16"}, {"layer.0#0 wgrad", "mxfp8"}};
    CHECK(precisions(plan) == want);
    TempDir dir;
    std::ostringstream module;
    write_te_recipe(plan, "run1", module);
    CHECK(module.str().find("FALLBACK = \"mxfp8\"") != std::string::npos);
    CHECK(module.str().find("nvfp4\"") == std::string::npos);
  }
  SECTION("an NVFP4 run: a tensor the table casts finer takes MXFP8; a BF16 run's kept tensors take FP8, its fallback BF16") {
    RunAdvice fp4;
    fp4.tensors.push_back(advice("l", "fprop", "x", Recommendation::kFinerRecipe, RecipeKind::kNvfp4, true));
    fp4.tensors.push_back(advice("l", "fprop", "w", Recommendation::kKeepFp8, RecipeKind::kNvfp4, true));
    fp4.tensors.push_back(advice("m", "fprop", "x", Recommendation::kKeepFp8, RecipeKind::kNvfp4, true));
    const TeRecipePlan p4 = te_recipe_plan(fp4);
    CHECK(p4.fallback == RecipeKind::kNvfp4);
    CHECK(precisions(p4) == std::map<std::string, std::string>{{"l#0 fprop", "mxfp8"}, {"m#0 fprop", "nvfp4"}});
    RunAdvice bf16;
    bf16.tensors.push_back(advice("l", "fprop", "x", Recommendation::kKeepFp8, RecipeKind::kTensorCurrent, false));
    bf16.tensors.push_back(advice("l", "wgrad", "dy", Recommendation::kFallBackToBf16, RecipeKind::kTensorCurrent, false));
    const TeRecipePlan p16 = te_recipe_plan(bf16);
    CHECK_FALSE(p16.fallback);
    CHECK(precisions(p16) == std::map<std::string, std::string>{{"l#0 fprop", "tensor_current"}, {"l#0 wgrad", "bf16"}});
  }
}
