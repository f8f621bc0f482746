// The sampling policy crosses the wire in both directions unchanged, and a client's operand or
// recipe number that no vocabulary row has is refused with the number.
#include "fp8scope/services/policy_wire.h"

#include <catch2/catch.hpp>

using namespace fp8scope;
using namespace fp8scope::server;

TEST_CASE("a policy round-trips through the wire with every field", "[policy_wire]") {
  SamplingPolicy p;
  p.version = 12;
  p.job = "pretrain";
  p.layer_regex = "blocks\\.[0-3]\\.";
  p.operands = {Operand::kW, Operand::kDy};
  p.every_n_steps = 4;
  p.start_step = 100;
  p.end_step = 900;
  p.max_bytes_per_step = 1 << 20;
  p.recipes = {RecipeKind::kMxfp4, RecipeKind::kTensorCurrent};
  const v1::Policy w = policy_to_wire(p);
  CHECK(w.operands(0) == v1::OPERAND_W);
  CHECK(w.recipes(0) == v1::RECIPE_MXFP4);
  const Result<SamplingPolicy> back = policy_from_wire(w);
  REQUIRE(back.ok());
  const SamplingPolicy& b = back.value();
  CHECK(b.version == 12);
  CHECK(b.job == "pretrain");
  CHECK(b.layer_regex == p.layer_regex);
  CHECK(b.operands == p.operands);
  CHECK(b.every_n_steps == 4);
  CHECK(b.start_step == 100);
  CHECK(b.end_step == 900);
  CHECK(b.max_bytes_per_step == 1u << 20);
  CHECK(b.recipes == p.recipes);
}

TEST_CASE("operand and recipe numbers the vocabulary lacks are refused", "[policy_wire]") {
  v1::Policy w;
  w.set_every_n_steps(1);
  w.add_operands(static_cast<v1::Operand>(9));
  CHECK(policy_from_wire(w).message() == "operands: expected x, w or dy, got 9");
  w.clear_operands();
  w.add_operands(v1::OPERAND_UNSPECIFIED);
  CHECK(!policy_from_wire(w).ok());
  w.clear_operands();
  w.add_recipes(static_cast<v1::Recipe>(99));
  CHECK(policy_from_wire(w).message() == "recipes: unknown recipe 99");
}
