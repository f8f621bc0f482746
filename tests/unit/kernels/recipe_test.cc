// Recipes are data with TE's defaults; validation names the field and what it expected.
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/stats_engine.h"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace fp8scope;

TEST_CASE("every recipe has a name that parses back, and its default is valid", "[recipe]") {
  for (RecipeKind kind : kAllRecipeKinds) {
    INFO(recipe_name(kind));
    CHECK(recipe_kind_from_name(recipe_name(kind)) == kind);
    CHECK(validate(default_recipe(kind)).ok());
  }
  CHECK(recipe_kind_from_name("nvfp4") == RecipeKind::kNvfp4);
  CHECK(!recipe_kind_from_name("nvfp8"));
}

TEST_CASE("defaults follow Transformer Engine", "[recipe]") {
  const Recipe delayed = default_recipe(RecipeKind::kTensorDelayed);
  CHECK(delayed.amax_history_length == 1024);
  CHECK(delayed.amax_algo == AmaxAlgo::kMax);
  CHECK(delayed.margin == 0.0f);
  CHECK(delayed.format_for(Operand::kX) == CastFormat::kE4M3);  // HYBRID
  CHECK(delayed.format_for(Operand::kDy) == CastFormat::kE5M2);
  const Recipe mx = default_recipe(RecipeKind::kMxfp8);
  CHECK(mx.block_rows == 1);
  CHECK(mx.block_cols == 32);
  CHECK(mx.format_for(Operand::kDy) == CastFormat::kE4M3);
  const Recipe b2 = default_recipe(RecipeKind::kBlock128x128);
  CHECK(b2.block_rows == 128);
  CHECK(b2.power_of_2_scales);
  // NVFP4BlockScaling: E2M1 both ways, 1x16 blocks, 16x16 for weights (recipe/__init__.py:600).
  const Recipe nv = default_recipe(RecipeKind::kNvfp4);
  CHECK(nv.format_for(Operand::kX) == CastFormat::kE2M1);
  CHECK(nv.format_for(Operand::kDy) == CastFormat::kE2M1);
  CHECK(nv.block_rows_for(Operand::kX) == 1);
  CHECK(nv.block_rows_for(Operand::kDy) == 1);
  CHECK(nv.block_rows_for(Operand::kW) == 16);
  CHECK(nv.block_cols == 16);
  const Recipe mx4 = default_recipe(RecipeKind::kMxfp4);
  CHECK(mx4.block_rows_for(Operand::kW) == 1);
  CHECK(mx4.block_cols == 32);
  CHECK(mx4.fp4());
  // MXFP8BlockScaling(enable_2d_quantization=True), TE d0067d0 (PR #2634): 32x32 blocks for
  // forward weights only (pytorch/quantization.py:1536-1548), 1x32 otherwise, E4M3 both ways.
  const Recipe mx2 = default_recipe(RecipeKind::kMxfp8_2d);
  CHECK(mx2.block_rows_for(Operand::kW) == 32);
  CHECK(mx2.block_rows_for(Operand::kX) == 1);
  CHECK(mx2.block_rows_for(Operand::kDy) == 1);
  CHECK(mx2.block_cols == 32);
  CHECK(mx2.format_for(Operand::kDy) == CastFormat::kE4M3);
  CHECK(!mx2.fp4());
}

TEST_CASE("an empty policy runs every recipe but mxfp8_2d, which TE leaves off by default, and NVFP4's options",
          "[recipe]") {
  const RecipeKind off[] = {RecipeKind::kMxfp8_2d, RecipeKind::kNvfp4Rht, RecipeKind::kNvfp4FourOverSix,
                            RecipeKind::kNvfp4Sr, RecipeKind::kNvfp4Row, RecipeKind::kNvfp4Te};
  CHECK(std::size(kDefaultRecipeKinds) + std::size(off) == std::size(kAllRecipeKinds));
  for (RecipeKind kind : kDefaultRecipeKinds) CHECK(std::find(std::begin(off), std::end(off), kind) == std::end(off));
  CHECK(off_by_default_recipe_list() == "mxfp8_2d, nvfp4_rht, nvfp4_4over6, nvfp4_sr, nvfp4_row, nvfp4_te");
}

// Each option of TE's NVFP4BlockScaling (TE d0067d0, common/recipe/__init__.py:559-566; pytorch/
// quantization.py:1692-1742) is one recipe that changes one thing of nvfp4's, for the operands TE
// applies it to.
TEST_CASE("NVFP4's options: 4over6 for X and W, stochastic rounding for Dy, row scaling for X", "[recipe]") {
  const Recipe plain = default_recipe(RecipeKind::kNvfp4);
  const Recipe four = default_recipe(RecipeKind::kNvfp4FourOverSix), sr = default_recipe(RecipeKind::kNvfp4Sr),
               row = default_recipe(RecipeKind::kNvfp4Row);
  for (const Recipe& r : {four, sr, row}) {
    CHECK(r.fp4());
    CHECK(r.block_cols == plain.block_cols);
    CHECK(r.weight_block_rows == plain.weight_block_rows);
    CHECK_FALSE(r.hadamard);
    CHECK(validate(r).ok());
  }
  CHECK(four.four_over_six_for(Operand::kX));
  CHECK(four.four_over_six_for(Operand::kW));
  CHECK_FALSE(four.four_over_six_for(Operand::kDy));  // quantization.py:1702-1709: forward tensors only
  CHECK(sr.stochastic_for(Operand::kDy));
  CHECK_FALSE(sr.stochastic_for(Operand::kX));  // recipe/__init__.py:597-607: gradients only
  CHECK_FALSE(sr.stochastic_for(Operand::kW));
  CHECK(row.row_scaled_for(Operand::kX));  // quantization.py:1738-1742: the forward input only
  CHECK_FALSE(row.row_scaled_for(Operand::kW));
  CHECK_FALSE(row.row_scaled_for(Operand::kDy));
  // The specs: 4over6's rule on X's 1x16 and W's 16x16 blocks, nvfp4's on Dy.
  CHECK(quant_spec_for(four, CastFormat::kE2M1, Operand::kW, std::nullopt).value().rule == ScaleRule::kBlockNvfp4FourOverSix);
  CHECK(quant_spec_for(four, CastFormat::kE2M1, Operand::kDy, std::nullopt).value().rule == ScaleRule::kBlockNvfp4);
  CHECK(quant_spec_for(sr, CastFormat::kE2M1, Operand::kDy, std::nullopt).value().stochastic);
  CHECK(quant_spec_for(row, CastFormat::kE2M1, Operand::kX, std::nullopt).value().row_scaled);
  CHECK_FALSE(quant_spec_for(row, CastFormat::kE2M1, Operand::kW, std::nullopt).value().row_scaled);
  // An option belongs to its recipe only.
  Recipe wrong = plain;
  wrong.four_over_six = true;
  CHECK(validate(wrong).message() == "nvfp4: expected 4over6 off, as the recipe defines it");
  wrong = sr;
  wrong.stochastic_rounding = false;
  CHECK(validate(wrong).message() == "nvfp4_sr: expected stochastic rounding on, as the recipe defines it");
}

TEST_CASE("nvfp4_rht is nvfp4 with TE's Hadamard transform of X and Dy, never of W", "[recipe]") {
  const Recipe rht = default_recipe(RecipeKind::kNvfp4Rht), plain = default_recipe(RecipeKind::kNvfp4);
  CHECK(rht.fp4());
  CHECK(rht.block_cols == plain.block_cols);
  CHECK(rht.weight_block_rows == plain.weight_block_rows);
  CHECK(rht.transforms(Operand::kX));
  CHECK(rht.transforms(Operand::kDy));
  CHECK_FALSE(rht.transforms(Operand::kW));
  CHECK_FALSE(plain.transforms(Operand::kX));
  CHECK(validate(rht).ok());
  Recipe wrong = plain;
  wrong.hadamard = true;
  CHECK(validate(wrong).message() == "nvfp4: expected the Hadamard transform off, as the recipe defines it");
}

// TE d0067d0, common/recipe/__init__.py:595-609: NVFP4BlockScaling()'s defaults, and which copy each
// GEMM reads (:593-594: the transform is for the column-wise copies, wgrad's).
TEST_CASE("nvfp4_te is NVFP4BlockScaling() as TE runs it: the transform where wgrad reads, SR on Dy", "[recipe]") {
  const Recipe te = default_recipe(RecipeKind::kNvfp4Te), plain = default_recipe(RecipeKind::kNvfp4);
  CHECK(validate(te).ok());
  CHECK(te.weight_block_rows == plain.weight_block_rows);  // 16x16 weights
  CHECK(te.stochastic_for(Operand::kDy));
  CHECK_FALSE(te.stochastic_for(Operand::kX));
  CHECK_FALSE(te.four_over_six_for(Operand::kX));
  CHECK_FALSE(te.row_scaled_for(Operand::kX));
  for (Operand op : {Operand::kX, Operand::kDy}) {
    CHECK(te.transforms(op));  // the quantizer's: it transforms the column-wise copy
    CHECK(te.transforms_read(op, GemmRole::kWgrad));
    CHECK_FALSE(te.transforms_read(op, GemmRole::kFprop));
    CHECK_FALSE(te.transforms_read(op, GemmRole::kDgrad));
    CHECK_FALSE(te.transforms_read(op, GemmRole::kUnknown));  // read as the row-wise copy
  }
  CHECK_FALSE(te.transforms(Operand::kW));
  // nvfp4_rht stands for the column-wise copies whatever the GEMM.
  CHECK(default_recipe(RecipeKind::kNvfp4Rht).transforms_read(Operand::kX, GemmRole::kFprop));
  Recipe wrong = default_recipe(RecipeKind::kNvfp4Rht);
  wrong.per_gemm_copy = true;
  CHECK(validate(wrong).message() == "nvfp4_rht: expected per-GEMM copies off, as the recipe defines it");
}

// TE d0067d0, pytorch/csrc/quantizer.cpp:2631-2633 (RHT: BF16 input only) and :2572-2580 (row
// scaling: a last dimension divisible by 16).
TEST_CASE("what TE would refuse is named with TE's reason, and nothing else is", "[recipe]") {
  for (RecipeKind kind : {RecipeKind::kNvfp4Rht, RecipeKind::kNvfp4Te}) {
    const Recipe r = default_recipe(kind);
    for (Operand op : {Operand::kX, Operand::kDy}) {
      const std::optional<std::string> why = te_refusal(r, op, DType::kF32, 64);
      REQUIRE(why);
      CHECK(why->find("BF16 input only") != std::string::npos);
      CHECK(why->find("quantizer.cpp:2631-2633") != std::string::npos);
      CHECK(why->find("f32") != std::string::npos);
      CHECK_FALSE(te_refusal(r, op, DType::kBF16, 64));
    }
    CHECK_FALSE(te_refusal(r, Operand::kW, DType::kF32, 64));  // weights are never transformed
  }
  const Recipe row = default_recipe(RecipeKind::kNvfp4Row);
  CHECK(te_refusal(row, Operand::kX, DType::kBF16, 40));
  CHECK_FALSE(te_refusal(row, Operand::kX, DType::kBF16, 48));
  CHECK_FALSE(te_refusal(row, Operand::kW, DType::kBF16, 40));
  for (RecipeKind kind : kAllRecipeKinds) {
    const Recipe r = default_recipe(kind);
    if (r.hadamard || r.row_scaled) continue;
    for (Operand op : {Operand::kX, Operand::kW, Operand::kDy}) CHECK_FALSE(te_refusal(r, op, DType::kF32, 40));
  }
}

TEST_CASE("validation errors say what was expected and what came", "[recipe]") {
  Recipe r = default_recipe(RecipeKind::kTensorDelayed);
  r.amax_history_length = 0;
  CHECK(validate(r).message() == "tensor_delayed: expected amax_history_length in [1, 1048576], got 0");
  r = default_recipe(RecipeKind::kTensorDelayed);
  r.margin = -1.0f;
  CHECK(validate(r).message().find("expected margin in [0, 64]") != std::string::npos);
  r = default_recipe(RecipeKind::kMxfp8);
  r.block_cols = 48;
  CHECK(validate(r).message() == "mxfp8: expected block columns a power of two in [16, 4096], got 48");
  r = default_recipe(RecipeKind::kTensorCurrent);
  r.block_rows = 1;
  r.block_cols = 32;
  CHECK(!validate(r).ok());
  r = default_recipe(RecipeKind::kTensorCurrent);
  r.backward_format = CastFormat::kE2M1;
  CHECK(validate(r).message() == "tensor_current: expected FP8 formats, got e2m1");
  r = default_recipe(RecipeKind::kNvfp4);
  r.backward_format = CastFormat::kE4M3;
  CHECK(validate(r).message() == "nvfp4: expected e2m1 elements forward and backward");
  r = default_recipe(RecipeKind::kNvfp4);
  r.weight_block_rows = 64;
  CHECK(validate(r).message() == "nvfp4: expected block rows 1, 16, 32 or 128, got 1 (weights 64)");
}

TEST_CASE("formats and operands parse by name", "[recipe]") {
  CHECK(format_from_name("e4m3") == CastFormat::kE4M3);
  CHECK(format_from_name("e5m2") == CastFormat::kE5M2);
  CHECK(format_from_name("e2m1") == CastFormat::kE2M1);
  CHECK(!format_from_name("E4M3"));
  CHECK(operand_from_name("dy") == Operand::kDy);
  CHECK(std::string(operand_name(Operand::kW)) == "w");
}
