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
  p.block_ranges = {{4, 1}, {32, 2}};
  SamplingRule every5;
  every5.every_n_steps = 5;
  std::snprintf(every5.layer_regex, sizeof every5.layer_regex, "%s", "fc1");
  p.te_logged = {{every5, "LogFp8TensorStats", Operand::kDy, {"underflows%", "mxfp8_mse_columnwise"}}};
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
  CHECK(b.block_ranges == p.block_ranges);
  REQUIRE(b.te_logged.size() == 1);
  CHECK(b.te_logged[0].rule.every_n_steps == 5);
  CHECK(std::string(b.te_logged[0].rule.layer_regex) == "fc1");
  CHECK(b.te_logged[0].feature == "LogFp8TensorStats");
  CHECK(b.te_logged[0].operand == Operand::kDy);
  CHECK(b.te_logged[0].stats == p.te_logged[0].stats);
}

TEST_CASE("operand and recipe numbers the vocabulary lacks are refused", "[policy_wire]") {
  v1::Policy w;
  w.set_every_n_steps(1);
  w.add_operands(static_cast<v1::Operand>(9));
  CHECK(policy_from_wire(w).message() == "operands: expected x, w, dy or out, got 9");
  w.clear_operands();
  w.add_operands(v1::OPERAND_UNSPECIFIED);
  CHECK(!policy_from_wire(w).ok());
  w.clear_operands();
  w.add_recipes(static_cast<v1::Recipe>(99));
  CHECK(policy_from_wire(w).message() == "recipes: unknown recipe 99");
}

TEST_CASE("a policy's rules round-trip, and a client's malformed rule is refused with what is wrong", "[policy_wire]") {
  SamplingPolicy p;
  PolicyRule r;
  r.rule.every_n_steps = 5;
  r.rule.phase = 0;
  r.rule.start_step = 100;
  r.rule.end_step = 501;
  r.rule.range_count = 2;
  r.rule.ranges[0] = {0, 21};
  r.rule.ranges[1] = {80, 101};
  r.rule.tensors = tensor_bit(GemmRole::kFprop, Operand::kX) | tensor_bit(GemmRole::kWgrad, Operand::kDy);
  r.rule.group = 3;
  std::snprintf(r.rule.layer_regex, sizeof r.rule.layer_regex, "%s", "(?:fc1|fc2)");
  std::snprintf(r.rule.and_layer_regex, sizeof r.rule.and_layer_regex, "%s", "^[^0-9]*6[^0-9]*$");
  r.source = "te.yaml:8: collection_2.transformer_engine.LogTensorStats activation";
  p.rules = {r};
  const Result<SamplingPolicy> back = policy_from_wire(policy_to_wire(p));
  REQUIRE(back.ok());
  REQUIRE(back.value().rules.size() == 1);
  const PolicyRule& b = back.value().rules[0];
  CHECK(format_rules({b.rule}) == format_rules({r.rule}));
  CHECK(b.source == r.source);
  CHECK(validate_policy(back.value()).ok());

  const auto refused = [&](auto&& spoil) {
    v1::Policy w = policy_to_wire(p);
    spoil(*w.mutable_rules(0));
    return policy_from_wire(w).message();
  };
  CHECK_THAT(refused([](v1::SamplingRule& w) { w.set_layer_regex("(["); }), Catch::Contains("rules[0]: layers: not a layer pattern"));
  CHECK_THAT(refused([](v1::SamplingRule& w) { w.set_and_layer_regex("fc\x01"); }), Catch::Contains("not printable ASCII"));
  CHECK_THAT(refused([](v1::SamplingRule& w) { w.set_every_n_steps(0); }), Catch::Contains("every: expected 1 or more"));
  CHECK_THAT(refused([](v1::SamplingRule& w) { w.mutable_ranges(1)->set_end(80); }), Catch::Contains("must end above its start"));
  CHECK_THAT(refused([](v1::SamplingRule& w) { w.mutable_tensors(0)->set_gemm(v1::GEMM_UNKNOWN); }), Catch::Contains("tensors"));
  CHECK_THAT(refused([](v1::SamplingRule& w) {
               for (int i = 0; i < 9; ++i) w.add_ranges()->set_end(1);
             }),
             Catch::Contains("more than 8 step ranges"));
  v1::Policy many = policy_to_wire(p);
  for (int i = 0; i < 16; ++i) *many.add_rules() = many.rules(0);
  CHECK_THAT(policy_from_wire(many).message(), Catch::Contains("rules: at most 16, got 17"));
}
