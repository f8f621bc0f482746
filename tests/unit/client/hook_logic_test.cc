// The hook's decisions, without a training process: which role a GEMM has and which tensor each
// operand is, how a GEMM is named from the range stack, which step it belongs to, whether it is
// sampled, and what it reads from cuBLAS descriptors (the cuBLASLt CPU fixture stands in for the
// library).
#include <cublasLt.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "fp8scope/hook/gemm_operands.h"
#include "fp8scope/hook/layer_names.h"
#include "fp8scope/hook/row_scaled_gemm.h"
#include "fp8scope/hook/sampler.h"
#include "fp8scope/hook/step_clock.h"

using namespace fp8scope::hook;
using fp8scope::DType;
using fp8scope::GemmRole;
using fp8scope::Operand;
using fp8scope::ScaleLayout;
namespace shm = fp8scope::shm;

TEST_CASE("roles follow the layout, operands follow the role", "[hook]") {
  CHECK(role_from_layout(true, false) == GemmRole::kFprop);
  CHECK(role_from_layout(false, false) == GemmRole::kDgrad);
  CHECK(role_from_layout(false, true) == GemmRole::kWgrad);
  CHECK(role_from_layout(true, true) == GemmRole::kUnknown);
  CHECK((operand_of_a(GemmRole::kFprop) == Operand::kW && operand_of_b(GemmRole::kFprop) == Operand::kX));
  CHECK((operand_of_a(GemmRole::kDgrad) == Operand::kW && operand_of_b(GemmRole::kDgrad) == Operand::kDy));
  CHECK((operand_of_a(GemmRole::kWgrad) == Operand::kX && operand_of_b(GemmRole::kWgrad) == Operand::kDy));
}

TEST_CASE("range suffixes set or narrow the role", "[hook]") {
  CHECK(parse_range_name("blocks.0.mlp.fc1/dgrad").layer == "blocks.0.mlp.fc1");
  CHECK(parse_range_name("blocks.0.mlp.fc1/dgrad").suffix == RoleSuffix::kDgrad);
  CHECK(parse_range_name("model/forward").suffix == RoleSuffix::kForward);
  CHECK(parse_range_name("/fprop").suffix == RoleSuffix::kNone);  // a suffix alone is a name
  CHECK(parse_range_name("fc1").suffix == RoleSuffix::kNone);
  // FP8 GEMMs are all TN on Hopper: the suffix decides.
  CHECK(resolve_role(GemmRole::kFprop, RoleSuffix::kWgrad) == GemmRole::kWgrad);
  CHECK(resolve_role(GemmRole::kDgrad, RoleSuffix::kForward) == GemmRole::kFprop);
  CHECK(resolve_role(GemmRole::kWgrad, RoleSuffix::kBackward) == GemmRole::kWgrad);
  CHECK(resolve_role(GemmRole::kFprop, RoleSuffix::kBackward) == GemmRole::kUnknown);
  CHECK(resolve_role(GemmRole::kDgrad, RoleSuffix::kNone) == GemmRole::kDgrad);
}

TEST_CASE("a GEMM is named by its innermost range and its ordinal there, per role", "[hook]") {
  RangeStack ranges;
  const int domain = 0;
  ranges.push("train_step", nullptr, /*step_marker=*/true);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "gemm#0");  // the step range names nothing
  ranges.push("blocks.0.attn", nullptr);
  ranges.push("blocks.0.attn.qkv", &domain);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "blocks.0.attn.qkv#0");
  ranges.pop(&domain);
  const GemmName first = ranges.name_next_gemm(GemmRole::kFprop, 0), second = ranges.name_next_gemm(GemmRole::kFprop, 0);
  CHECK(first.layer == "blocks.0.attn#0");
  CHECK(second.layer == "blocks.0.attn#1");
  CHECK(ranges.name_next_gemm(GemmRole::kDgrad, 0).layer == "blocks.0.attn#0");  // its own count
  ranges.pop(nullptr);
  ranges.push("blocks.0.mlp.fc1/backward", nullptr);
  const GemmName dgrad = ranges.name_next_gemm(GemmRole::kDgrad, 0), wgrad = ranges.name_next_gemm(GemmRole::kWgrad, 0);
  CHECK((dgrad.layer == "blocks.0.mlp.fc1#0" && dgrad.role == GemmRole::kDgrad));
  CHECK((wgrad.layer == "blocks.0.mlp.fc1#0" && wgrad.role == GemmRole::kWgrad));
  ranges.pop(&domain);  // another domain's pop leaves this range alone
  CHECK(ranges.depth() == 2);
  ranges.pop(nullptr);
  ranges.pop(nullptr);
  ranges.pop(nullptr);  // a pop without a push is ignored
  CHECK(ranges.depth() == 0);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "gemm#7");  // the 8th GEMM of step 0
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 1).layer == "gemm#0");  // a new step counts afresh
}

TEST_CASE("a module's declared GEMMs name its GEMMs as TE names LayerNormMLP's, in step when one is skipped", "[hook]") {
  RangeStack ranges;
  CHECK(parse_declared_gemms("fc1/fprop  fc2/fprop") ==
        std::vector<DeclaredGemm>{{"fc1", GemmRole::kFprop}, {"fc2", GemmRole::kFprop}});
  CHECK(parse_declared_gemms("/dgrad /wgrad") == std::vector<DeclaredGemm>{{"", GemmRole::kDgrad}, {"", GemmRole::kWgrad}});
  for (const char* bad : {"", "fc1", "fc1/unknown", "fc1/forward", "a#b/fprop", "abcdefghijklmnopqrstuvwxy/fprop"}) {
    CHECK_FALSE(parse_declared_gemms(bad));
  }
  // Forward: fc1 then fc2, and again for a second micro-batch.
  ranges.push("model.layers.1.layernorm_mlp/forward", nullptr);
  ranges.declare_gemms(*parse_declared_gemms("fc1/fprop fc2/fprop"));
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) names.push_back(ranges.name_next_gemm(GemmRole::kFprop, 0).layer);
  CHECK(names == std::vector<std::string>{"model.layers.1.layernorm_mlp.fc1#0", "model.layers.1.layernorm_mlp.fc2#0",
                                          "model.layers.1.layernorm_mlp.fc1#1", "model.layers.1.layernorm_mlp.fc2#1"});
  ranges.pop(nullptr);
  // Backward with TN GEMMs (FP8 on Hopper): the layout cannot tell, the declaration does.
  ranges.push("model.layers.1.layernorm_mlp/backward", nullptr);
  ranges.declare_gemms(*parse_declared_gemms("fc2/dgrad fc2/wgrad fc1/dgrad fc1/wgrad"));
  std::vector<std::pair<std::string, GemmRole>> got;
  for (int i = 0; i < 4; ++i) {
    const GemmName n = ranges.name_next_gemm(GemmRole::kFprop, 0);  // TN: fprop's layout, unknown in a backward range
    got.emplace_back(n.layer, n.role);
  }
  CHECK(got == std::vector<std::pair<std::string, GemmRole>>{{"model.layers.1.layernorm_mlp.fc2#0", GemmRole::kDgrad},
                                                             {"model.layers.1.layernorm_mlp.fc2#0", GemmRole::kWgrad},
                                                             {"model.layers.1.layernorm_mlp.fc1#0", GemmRole::kDgrad},
                                                             {"model.layers.1.layernorm_mlp.fc1#0", GemmRole::kWgrad}});
  ranges.pop(nullptr);
  // A layout that tells its role skips to the next GEMM of that role: fc1 without its dgrad.
  ranges.push("model.layers.0.layernorm_mlp/backward", nullptr);
  ranges.declare_gemms(*parse_declared_gemms("fc2/dgrad fc2/wgrad fc1/dgrad fc1/wgrad"));
  ranges.name_next_gemm(GemmRole::kDgrad, 0);
  ranges.name_next_gemm(GemmRole::kWgrad, 0);
  const GemmName fc1_wgrad = ranges.name_next_gemm(GemmRole::kWgrad, 0);
  CHECK((fc1_wgrad.layer == "model.layers.0.layernorm_mlp.fc1#0" && fc1_wgrad.role == GemmRole::kWgrad));
  ranges.pop(nullptr);
  // A role the declaration lacks is named as without one.
  ranges.push("model.proj/forward", nullptr);
  ranges.declare_gemms(*parse_declared_gemms("/dgrad"));
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "model.proj#0");
  ranges.pop(nullptr);
}

TEST_CASE("Transformer Engine's own NVTX ranges name no layer, and give their GEMMs' roles", "[hook]") {
  RangeStack ranges;
  ranges.push("model.layers.1.self_attention.proj/backward", nullptr);
  ranges.push("_Linear_backward", nullptr);  // get_nvtx_range_context("_Linear_backward")
  ranges.push("transformer_engine._Linear.backward.proj.dgrad_gemm", nullptr);
  const GemmName dgrad = ranges.name_next_gemm(GemmRole::kFprop, 0);  // TN
  CHECK((dgrad.layer == "model.layers.1.self_attention.proj#0" && dgrad.role == GemmRole::kDgrad));
  ranges.pop(nullptr);
  ranges.push("transformer_engine._Linear.backward.proj.wgrad_gemm", nullptr);
  const GemmName wgrad = ranges.name_next_gemm(GemmRole::kFprop, 0);
  CHECK((wgrad.layer == "model.layers.1.self_attention.proj#0" && wgrad.role == GemmRole::kWgrad));
  ranges.pop(nullptr);
  ranges.pop(nullptr);
  ranges.pop(nullptr);
  ranges.push("model.layers.1.layernorm_mlp/forward", nullptr);
  ranges.push("LayerNormMLP forward", nullptr);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "model.layers.1.layernorm_mlp#0");
  ranges.pop(nullptr);
  ranges.push("LayerNormMLP forwards", nullptr);  // not TE's: a range of its own
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "LayerNormMLP forwards#0");
  ranges.pop(nullptr);
  ranges.pop(nullptr);
  ranges.push("_GroupedLinear_wgrad", nullptr);  // delayed wgrad outside any module range
  const GemmName outside = ranges.name_next_gemm(GemmRole::kFprop, 0);
  CHECK((outside.layer.starts_with("gemm#") && outside.role == GemmRole::kWgrad));
}

TEST_CASE("experts keep their index: by range name, by the C API, and by declared tokens", "[hook]") {
  RangeStack ranges;
  // "...experts.N": expert N of the layer "...experts".
  ranges.push("layers.3.mlp.experts.5/forward", nullptr);
  GemmName n = ranges.name_next_gemm(GemmRole::kFprop, 0);
  CHECK((n.layer == "layers.3.mlp.experts#0" && n.expert == 5 && n.role == GemmRole::kFprop));
  ranges.pop(nullptr);
  ranges.push("layers.3.mlp.experts.12", nullptr);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "layers.3.mlp.experts#0");  // a name of its own range
  ranges.pop(nullptr);
  ranges.push("layers.3.mlp.fc.5", nullptr);  // no "experts" before the number: not an expert
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).expert == -1);
  ranges.pop(nullptr);
  // Declared tokens: the range's GEMMs of each role are the experts with tokens, in order.
  ranges.push("layers.3.mlp.experts/forward", nullptr);
  ranges.declare_tokens({7, 0, 3, 0, 9});
  std::vector<std::int64_t> experts;
  for (int i = 0; i < 6; ++i) experts.push_back(ranges.name_next_gemm(GemmRole::kFprop, 0).expert);
  CHECK(experts == std::vector<std::int64_t>{0, 2, 4, 0, 2, 4});
  CHECK(ranges.name_next_gemm(GemmRole::kDgrad, 0).expert == 0);  // each role counts on its own
  const GemmName grouped = ranges.name_next_gemm(GemmRole::kWgrad, 0, /*grouped=*/true);
  CHECK((grouped.expert == -1 && grouped.declared_tokens.size() == 5));  // a grouped GEMM holds them all
  ranges.pop(nullptr);
  // The C API wins, until cleared.
  ranges.set_expert(3);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 1).expert == 3);
  ranges.set_expert(-1);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 1).expert == -1);
}

TEST_CASE("the sampler rotates through the experts of a call when told to sample only some", "[hook]") {
  shm::PolicyCopy p;
  p.every_n_steps = 1;
  Sampler all(p);
  CHECK(all.experts_for_call("moe#0", 4) == std::vector<std::uint32_t>{0, 1, 2, 3});
  p.experts_per_call = 3;
  Sampler some(p);
  CHECK(some.experts_for_call("moe#0", 8) == std::vector<std::uint32_t>{0, 1, 2});
  CHECK(some.experts_for_call("moe#0", 8) == std::vector<std::uint32_t>{3, 4, 5});
  CHECK(some.experts_for_call("moe#0", 8) == std::vector<std::uint32_t>{6, 7, 0});  // every one seen in 3 calls
  CHECK(some.experts_for_call("other#0", 8) == std::vector<std::uint32_t>{0, 1, 2});  // each layer its own turn
}

TEST_CASE("names become printable, bounded label values", "[hook]") {
  RangeStack ranges;
  ranges.push(std::string("layer\x01\xff", 7), nullptr);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "layer__#0");
  ranges.push(std::string(1000, 'a'), nullptr);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer.size() <= kMaxLayerLabelBytes);
  ranges.push("", nullptr);
  CHECK(ranges.name_next_gemm(GemmRole::kFprop, 0).layer == "unnamed#0");
}

TEST_CASE("steps: the first GEMM's repeat, an NVTX step range, or the C API", "[hook]") {
  StepClock clock;
  const std::uint64_t w0 = gemm_signature(&clock, 64, 32, true, false);
  const std::uint64_t w1 = gemm_signature(&clock, 64, 32, false, false);  // the same weight, in dgrad
  CHECK(w0 != w1);
  CHECK(clock.on_gemm(w0) == 0);
  CHECK(clock.on_gemm(w1) == 0);
  CHECK(clock.on_gemm(w0) == 1);
  CHECK(clock.on_gemm(w1) == 1);
  clock.advance_from_range();  // the first step range opens the current step
  CHECK(clock.source() == StepClock::Source::kNvtxRange);
  CHECK(clock.on_gemm(w0) == 1);
  clock.advance_from_range();
  CHECK(clock.on_gemm(w0) == 2);
  clock.set_from_api(100);
  clock.advance_from_range();  // the API wins from now on
  CHECK(clock.on_gemm(w0) == 100);
  CHECK_FALSE(clock.needs_signature());
}

namespace {

// A shared segment in this process's memory, for the policy the shipper would write into it.
struct PolicySegment {
  PolicySegment() { REQUIRE(shm::initialize(base(), shm::data_offset() + 4096, 1)); }
  void* base() { return memory.data() + (shm::kAlign - reinterpret_cast<std::uintptr_t>(memory.data()) % shm::kAlign); }
  shm::Header* header() { return static_cast<shm::Header*>(base()); }
  std::vector<unsigned char> memory = std::vector<unsigned char>(shm::data_offset() + 4096 + shm::kAlign);
};

}  // namespace

TEST_CASE("the sampler follows the environment, then the daemon's policy", "[hook]") {
  setenv("FP8SCOPE_EVERY", "4", 1);
  setenv("FP8SCOPE_START_STEP", "2", 1);
  setenv("FP8SCOPE_OPERANDS", "x,dy", 1);
  setenv("FP8SCOPE_LAYER_REGEX", "mlp", 1);
  setenv("FP8SCOPE_BYTES_PER_STEP", "1000", 1);
  Sampler sampler(policy_from_environment());
  for (const char* v : {"FP8SCOPE_EVERY", "FP8SCOPE_START_STEP", "FP8SCOPE_OPERANDS", "FP8SCOPE_LAYER_REGEX",
                        "FP8SCOPE_BYTES_PER_STEP"}) {
    unsetenv(v);
  }
  CHECK_FALSE(sampler.step_selected(nullptr, 0));
  CHECK(sampler.step_selected(nullptr, 2));
  CHECK_FALSE(sampler.step_selected(nullptr, 3));
  CHECK(sampler.step_selected(nullptr, 6));
  const TensorSelection mlp = sampler.select(6, "blocks.0.mlp.fc1#0");
  CHECK(mlp.takes(GemmRole::kFprop, Operand::kX));
  CHECK(mlp.takes(GemmRole::kUnknown, Operand::kDy));
  CHECK_FALSE(mlp.takes(GemmRole::kFprop, Operand::kW));
  CHECK(sampler.select(6, "blocks.0.attn.qkv#0").none());
  CHECK(sampler.charge(6, 600));
  CHECK_FALSE(sampler.charge(6, 600));  // over the step's budget
  CHECK(sampler.charge(10, 600));       // a new step, a new budget

  // The daemon's policy arrives through the segment and replaces the environment's.
  PolicySegment memory;
  shm::Header* segment = memory.header();
  shm::PolicyCopy p;
  p.version = 2;
  p.every_n_steps = 1;
  shm::write_policy(segment, p);
  CHECK(sampler.step_selected(segment, 3));
  CHECK(sampler.select(3, "blocks.0.attn.qkv#0").takes(GemmRole::kDgrad, Operand::kW));
  CHECK(sampler.charge(3, 1u << 30));
}

TEST_CASE("rules select steps, modules and tensors each on their own, and replace the policy's selection", "[hook]") {
  // Two rules as a TE config's two sections make them: fc1's activations every 5th step from 0 in
  // fprop only, and every tensor of the attention modules at steps 3-4 and 20-21.
  setenv("FP8SCOPE_EVERY", "1000", 1);  // ignored: rules replace the selection variables
  setenv("FP8SCOPE_RULES",
         "every=5\ttensors=fprop:x\tlayers=fc1$\n"
         "every=1\tranges=3-5,20-22\tlayers=(^|\\.)attn\\.",
         1);
  Sampler sampler(policy_from_environment());
  unsetenv("FP8SCOPE_EVERY");
  unsetenv("FP8SCOPE_RULES");
  CHECK(sampler.step_selected(nullptr, 0));
  CHECK(sampler.step_selected(nullptr, 3));  // the second rule's range
  CHECK_FALSE(sampler.step_selected(nullptr, 6));
  CHECK(sampler.step_selected(nullptr, 10));
  CHECK(sampler.step_selected(nullptr, 21));
  CHECK_FALSE(sampler.step_selected(nullptr, 22));

  // A module is matched without its GEMM ordinal: "fc1$" selects "blocks.0.mlp.fc1#1".
  const TensorSelection fc1 = sampler.select(10, "blocks.0.mlp.fc1#1");
  CHECK(fc1.takes(GemmRole::kFprop, Operand::kX));
  CHECK(fc1.takes(GemmRole::kUnknown, Operand::kX));  // x in some GEMM of the rule
  CHECK_FALSE(fc1.takes(GemmRole::kWgrad, Operand::kX));
  CHECK_FALSE(fc1.takes(GemmRole::kFprop, Operand::kW));
  CHECK_FALSE(fc1.takes(GemmRole::kUnknown, Operand::kW));
  CHECK(sampler.select(3, "blocks.0.mlp.fc1#0").none());  // fc1's rule is not at step 3
  CHECK(sampler.select(10, "blocks.0.attn.qkv#0").none());
  const TensorSelection attn = sampler.select(21, "blocks.0.attn.qkv#0");
  CHECK(attn.takes(GemmRole::kWgrad, Operand::kDy));
  CHECK(attn.takes(GemmRole::kDgrad, Operand::kW));
  CHECK(sampler.select(21, "blocks.0.mlp.fc2#0").none());

  // A policy from the daemon with rules; then one without, and the policy's own selection is back.
  PolicySegment memory;
  shm::Header* segment = memory.header();
  shm::PolicyCopy p;
  p.version = 2;
  p.every_n_steps = 1;
  p.rule_count = 1;
  p.rules[0].every_n_steps = 2;
  p.rules[0].phase = 1;
  p.rules[0].start_step = 5;
  p.rules[0].tensors = fp8scope::tensor_bit(GemmRole::kWgrad, Operand::kDy);
  shm::write_policy(segment, p);
  CHECK_FALSE(sampler.step_selected(segment, 3));  // below start_step
  CHECK_FALSE(sampler.step_selected(segment, 6));  // counted from phase 1: 5, 7, 9 ...
  CHECK(sampler.step_selected(segment, 7));
  CHECK(sampler.select(7, "anything#0").takes(GemmRole::kWgrad, Operand::kDy));
  CHECK_FALSE(sampler.select(7, "anything#0").takes(GemmRole::kDgrad, Operand::kDy));
  p.version = 3;
  p.rule_count = 0;
  shm::write_policy(segment, p);
  CHECK(sampler.step_selected(segment, 6));
  CHECK(sampler.select(6, "anything#0").takes(GemmRole::kDgrad, Operand::kDy));

  // Two groups (a TE config's sections) selecting one layer: neither samples it, and it is told.
  p.version = 4;
  p.rule_count = 2;
  p.rules[0] = fp8scope::SamplingRule{};
  p.rules[0].group = 1;
  std::snprintf(p.rules[0].layer_regex, sizeof p.rules[0].layer_regex, "%s", "mlp");
  p.rules[1] = fp8scope::SamplingRule{};
  p.rules[1].group = 2;
  std::snprintf(p.rules[1].layer_regex, sizeof p.rules[1].layer_regex, "%s", "fc1");
  std::snprintf(p.rules[1].and_layer_regex, sizeof p.rules[1].and_layer_regex, "%s", "^blocks\\.0\\.");
  shm::write_policy(segment, p);
  REQUIRE(sampler.step_selected(segment, 7));
  bool conflict = false;
  CHECK(sampler.select(7, "blocks.0.mlp.fc1#0", &conflict).none());
  CHECK(conflict);
  CHECK_FALSE(sampler.select(7, "blocks.1.mlp.fc1#0", &conflict).none());  // the second rule's and-pattern fails
  CHECK_FALSE(conflict);
  CHECK_FALSE(sampler.select(7, "blocks.0.attn.fc1#0", &conflict).none());
  CHECK_FALSE(conflict);

  // A rule whose pattern does not compile selects nothing, not everything.
  p.version = 5;
  p.rule_count = 1;
  std::snprintf(p.rules[0].layer_regex, sizeof p.rules[0].layer_regex, "%s", "([");
  shm::write_policy(segment, p);
  CHECK(sampler.step_selected(segment, 7) == false);
  CHECK(sampler.select(7, "anything#0").none());
}

TEST_CASE("a GEMM's output is sampled only where a policy or rule names it", "[hook]") {
  // Every (role, operand) has a bit of its own, the unknown role's included.
  std::set<std::uint32_t> bits;
  for (const fp8scope::GemmRoleTerm& g : fp8scope::kGemmRoles) {
    for (const fp8scope::OperandTerm& o : fp8scope::kOperands) bits.insert(fp8scope::tensor_bit(g.value, o.value));
  }
  CHECK(bits.size() == std::size(fp8scope::kGemmRoles) * std::size(fp8scope::kOperands));
  // No operands named, no tensors named: the inputs, not the output.
  for (const TensorSelection none_named : {TensorSelection::of_operands(0), TensorSelection::of_tensors(0)}) {
    for (GemmRole g : {GemmRole::kFprop, GemmRole::kDgrad, GemmRole::kWgrad, GemmRole::kUnknown}) {
      CHECK(none_named.takes(g, Operand::kX));
      CHECK(none_named.takes(g, Operand::kDy));
      CHECK_FALSE(none_named.takes(g, Operand::kOut));
    }
  }
  const TensorSelection outputs = TensorSelection::of_operands(1u << static_cast<unsigned>(Operand::kOut));
  CHECK(outputs.takes(GemmRole::kWgrad, Operand::kOut));
  CHECK_FALSE(outputs.takes(GemmRole::kWgrad, Operand::kX));
  // A rule's output of one GEMM: that GEMM's only, and an unknown GEMM's (it may be that one).
  const TensorSelection dgrad_out = TensorSelection::of_tensors(fp8scope::tensor_bit(GemmRole::kDgrad, Operand::kOut));
  CHECK(dgrad_out.takes(GemmRole::kDgrad, Operand::kOut));
  CHECK(dgrad_out.takes(GemmRole::kUnknown, Operand::kOut));
  CHECK_FALSE(dgrad_out.takes(GemmRole::kFprop, Operand::kOut));
  CHECK_FALSE(dgrad_out.takes(GemmRole::kDgrad, Operand::kDy));
  // As FP8SCOPE_RULES writes and reads it.
  std::string error;
  const auto rules = fp8scope::parse_rules("tensors=fprop:out,wgrad:dy", &error);
  REQUIRE(rules);
  CHECK(rules->front().tensors ==
        (fp8scope::tensor_bit(GemmRole::kFprop, Operand::kOut) | fp8scope::tensor_bit(GemmRole::kWgrad, Operand::kDy)));
  CHECK(fp8scope::format_rules(*rules).find("tensors=fprop:out,wgrad:dy") != std::string::npos);
  CHECK(fp8scope::rule_problem(rules->front()).empty());
}

TEST_CASE("a malformed environment is reported and ignored", "[hook]") {
  setenv("FP8SCOPE_EVERY", "ten", 1);
  setenv("FP8SCOPE_LAYER_REGEX", "([", 1);
  Sampler sampler(policy_from_environment());
  unsetenv("FP8SCOPE_EVERY");
  unsetenv("FP8SCOPE_LAYER_REGEX");
  CHECK(sampler.step_selected(nullptr, 10));  // the default: every 10th step
  CHECK_FALSE(sampler.step_selected(nullptr, 5));
  CHECK_FALSE(sampler.select(10, "anything").none());  // an invalid regex selects every layer
}

TEST_CASE("cublasGemmEx arguments describe the stored matrices", "[hook]") {
  const float a[4] = {}, b[4] = {};
  // C (m x n) = A^T (m x k) B (k x n): A is stored k x m.
  float c[4] = {};
  ReadResult r = read_cublas_call("cublasGemmEx", true, false, 48, 16, 32, a, CUDA_R_16BF, 40, 0, b, CUDA_R_16BF, 32,
                                  0, CublasOutput{c, CUDA_R_32F, 50, 0}, 1, nullptr);
  REQUIRE(r.call);
  // C, the output, is m x n with its own leading dimension.
  REQUIRE(r.call->d);
  CHECK((r.call->d->rows == 48 && r.call->d->cols == 16 && r.call->d->ld == 50 && r.call->d->element_bits == 32));
  CHECK(r.call->d->payload_bytes() == 48 * 16 * 4);
  CHECK((r.call->a.rows == 32 && r.call->a.cols == 48 && r.call->a.ld == 40 && r.call->a.element_bits == 16));
  CHECK((r.call->a.inner() == 32 && r.call->a.outer() == 48));  // row-major view [48, 32]
  CHECK((r.call->b.rows == 32 && r.call->b.cols == 16));
  CHECK(r.call->a.payload_bytes() == 48 * 32 * 2);
  CHECK_FALSE(read_cublas_call("cublasGemmEx", false, false, 4, 4, 4, a, CUDA_R_8I, 4, 0, b, CUDA_R_8I, 4, 0,
                               CublasOutput{c, CUDA_R_32F, 4, 0}, 1, nullptr).call);
  // An output C too narrow for its rows: the operands are sampled, the output is counted.
  const ReadResult narrow_c = read_cublas_call("cublasGemmEx", false, false, 4, 4, 4, a, CUDA_R_32F, 4, 0, b,
                                               CUDA_R_32F, 4, 0, CublasOutput{c, CUDA_R_32F, 2, 0}, 1, nullptr);
  REQUIRE(narrow_c.call);
  CHECK_FALSE(narrow_c.call->d);
  CHECK(narrow_c.call->d_reason == shm::DropReason::kUnsupportedLayout);
  const ReadResult bad_ld = read_cublas_call("cublasGemmEx", false, false, 8, 4, 4, a, CUDA_R_32F, 4, 0, b, CUDA_R_32F,
                                             4, 0, CublasOutput{c, CUDA_R_32F, 8, 0}, 1, nullptr);
  CHECK_FALSE(bad_ld.call);
  CHECK(bad_ld.reason == shm::DropReason::kUnsupportedLayout);
}

// cuBLASLt's grouped API (cuBLAS 13.2+, not in the installed headers), as the fixture implements
// it from the documentation.
extern "C" cublasStatus_t cublasLtGroupedMatrixLayoutCreate(cublasLtMatrixLayout_t*, cudaDataType, int, const void*,
                                                            const void*, const void*);

TEST_CASE("cuBLASLt grouped layouts: shapes on the device, per-group scalar and block scales", "[hook]") {
  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const std::int32_t t = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  // Four experts; the "device" arrays are host memory in the fixtures.
  const std::int64_t rows64[4] = {64, 64, 64, 64}, cols64[4] = {32, 0, 96, 32};
  const std::int32_t rows[4] = {64, 64, 64, 64}, cols[4] = {32, 0, 96, 32};
  const void* pointers[4] = {};
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr;
  REQUIRE(cublasLtGroupedMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, 4, rows, rows, rows) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtGroupedMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, 4, rows64, cols64, rows64) == CUBLAS_STATUS_SUCCESS);
  const std::int32_t wide = 1;  // CUBLASLT_INTEGER_WIDTH_64 for B's rows, cols and ld
  cublasLtMatrixLayoutSetAttribute(lb, static_cast<cublasLtMatrixLayoutAttribute_t>(12), &wide, sizeof wide);
  cublasLtMatrixLayoutSetAttribute(lb, static_cast<cublasLtMatrixLayoutAttribute_t>(13), &wide, sizeof wide);
  auto read = [&] {
    return read_cublaslt_call(read_matmul_shape(desc, la), desc, nullptr, pointers, la, pointers, lb, pointers, lb, nullptr);
  };
  ReadResult r = read();
  REQUIRE(r.call);
  CHECK(r.call->experts == 4);
  CHECK_FALSE(r.call->d);  // an expert GEMM's outputs are not copied
  CHECK(r.call->d_reason == shm::DropReason::kOutputUnsupported);
  CHECK(host_tokens(*r.call, GemmRole::kFprop).empty());  // the device knows them: the gather kernel reads them
  CHECK((r.call->b.device_dims.rows == rows64 && r.call->b.device_dims.cols == cols64 && r.call->b.device_dims.ld == rows64));
  CHECK((r.call->b.device_dims.rows_cols_64 && r.call->b.device_dims.ld_64));
  CHECK((r.call->a.device_dims.rows == rows && !r.call->a.device_dims.rows_cols_64));
  CHECK((r.call->a.scale_layout == ScaleLayout::kTensorScalar && !r.call->a.scales_per_expert));
  (void)cols;
  SECTION("per-group scalar scales: device arrays of pointers") {
    const std::int32_t per_group = 6;  // CUBLASLT_MATMUL_MATRIX_SCALE_PER_BATCH_SCALAR_32F
    const float* scale_pointers[4] = {};
    const void* array = scale_pointers;
    for (auto [mode_attr, pointer_attr] : {std::pair{CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER},
                                           std::pair{CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER}}) {
      cublasLtMatmulDescSetAttribute(desc, mode_attr, &per_group, sizeof per_group);
      cublasLtMatmulDescSetAttribute(desc, pointer_attr, &array, sizeof array);
    }
    r = read();
    REQUIRE(r.call);
    CHECK((r.call->a.scales_per_expert && r.call->a.scales == array && r.call->b.scales_per_expert));
  }
  SECTION("per-group block scales: a device array of pointers to each group's scale tensor") {
    const std::int32_t mxfp8 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mxfp8, sizeof mxfp8);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mxfp8, sizeof mxfp8);
    r = read();
    CHECK_FALSE(r.call);  // no scale pointers: nothing to read them from
    CHECK(r.reason == shm::DropReason::kUnreadableBatch);
    const void* scale_pointers[4] = {};
    const void* array = scale_pointers;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &array, sizeof array);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &array, sizeof array);
    r = read();
    REQUIRE(r.call);
    for (const OperandView* v : {&r.call->a, &r.call->b}) {
      CHECK((v->scale_layout == ScaleLayout::kVec32Ue8m0 && v->scales == array && v->scales_per_expert));
    }
    // TN: K runs along A's and B's contiguous rows.
    CHECK((!r.call->a.k_is_outer && !r.call->b.k_is_outer));
  }
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

TEST_CASE("cublasGemmBatchedEx and cublasGemmGroupedBatchedEx: an expert per batch element or problem", "[hook]") {
  const char pointers[1] = {};
  ReadResult r = read_cublas_batched_call("cublasGemmBatchedEx", true, false, 32, 48, 64, pointers, CUDA_R_16BF, 64,
                                          pointers, CUDA_R_16BF, 64, 5, nullptr);
  REQUIRE(r.call);
  CHECK(r.call->experts == 5);
  CHECK((r.call->a.rows == 64 && r.call->a.cols == 32 && r.call->b.rows == 64 && r.call->b.cols == 48));
  CHECK(host_tokens(*r.call, GemmRole::kFprop) == std::vector<std::uint64_t>(5, 48));
  CHECK(host_tokens(*r.call, GemmRole::kWgrad) == std::vector<std::uint64_t>(5, 64));  // TN wgrad: K is the tokens
  // Two groups: two problems of 16 tokens, then one with none (its place, and the expert's index, kept).
  GroupedProblems g;
  g.transa = {true, true}, g.transb = {false, false};
  g.m = {32, 32}, g.n = {16, 0}, g.k = {64, 64}, g.lda = {64, 64}, g.ldb = {64, 64}, g.group_size = {2, 1};
  r = read_cublas_grouped_call("cublasGemmGroupedBatchedEx", g, pointers, CUDA_R_16BF, pointers, CUDA_R_16BF, nullptr);
  REQUIRE(r.call);
  CHECK(r.call->experts == 3);
  CHECK(host_tokens(*r.call, GemmRole::kFprop) == std::vector<std::uint64_t>{16, 16, 0});
  CHECK((r.call->b.shape_of(2).cols == 0 && r.call->b.shape_of(0).rows == 64));
  g.transb = {false, true};  // experts transposed differently: no one role
  CHECK(read_cublas_grouped_call("g", g, pointers, CUDA_R_16BF, pointers, CUDA_R_16BF, nullptr).reason ==
        shm::DropReason::kUnreadableBatch);
  CHECK(read_cublas_batched_call("b", true, false, 32, 48, 64, pointers, CUDA_R_16BF, 16, pointers, CUDA_R_16BF, 64, 5,
                                 nullptr).reason == shm::DropReason::kUnsupportedLayout);  // lda < rows
}

TEST_CASE("cublasLtMatmul descriptors: layouts, batches, FP8 scales, and what cannot be read", "[hook]") {
  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const std::int32_t t = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  const float scale = 0.25f;
  const float* scale_ptr = &scale;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_ptr, sizeof scale_ptr);
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, 64, 32, 64) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 16, 64, 16) == CUBLAS_STATUS_SUCCESS);
  const std::int32_t row = CUBLASLT_ORDER_ROW, batches = 3;
  const std::int64_t stride = 16 * 64;
  cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row);
  cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_LD, &stride, sizeof stride);  // ld 1024 >= 64 cols
  cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches, sizeof batches);
  cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
  const char data[1] = {};
  auto read = [&] { return read_cublaslt_call(read_matmul_shape(desc, la), desc, nullptr, data, la, data, lb, data, lb, nullptr); };
  ReadResult r = read();
  REQUIRE(r.call);
  CHECK(r.call->transa);
  CHECK_FALSE(r.call->transb);
  CHECK((r.call->a.dtype == DType::kE4M3 && r.call->a.scales == &scale &&
         r.call->a.scale_layout == ScaleLayout::kTensorScalar));
  CHECK(r.call->a.payload_bytes() == 64 * 32);  // a scalar scale travels in the record's header
  CHECK((r.call->b.row_major && r.call->b.inner() == 64 && r.call->b.outer() == 16 && r.call->b.batch_count == 3));
  CHECK(r.call->b.scale_layout == ScaleLayout::kNone);

  SECTION("every documented scale mode is read, with its tensor and its size") {
    // A: E4M3 stored 64 x 32 and transposed (TN): K = 64 runs along the contiguous dimension, M = 32.
    const struct {
      std::int32_t mode;
      ScaleLayout layout;
      std::uint64_t bytes;
    } modes[] = {
        {CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, ScaleLayout::kVec32Ue8m0, 128 * 4},     // 128x4 tiles
        {CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, ScaleLayout::kVec16Ue4m3, 128 * 4},     // 4 blocks: one tile
        {CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, ScaleLayout::kVec128F32, 1 * 32 * 4},     // [K/128][M]
        {CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, ScaleLayout::kBlock128x128F32, 4 * 4},  // [M/128][4]
        {CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, ScaleLayout::kRowVector, 32 * 4},      // one per M
    };
    for (const auto& m : modes) {
      INFO("mode " << m.mode);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &m.mode, sizeof m.mode);
      r = read();
      REQUIRE(r.call);
      CHECK(r.call->a.scale_layout == m.layout);
      CHECK(r.call->a.scales == &scale);
      CHECK_FALSE(r.call->a.k_is_outer);
      CHECK(r.call->a.scale_bytes == m.bytes);
      CHECK(r.call->a.payload_bytes() == 64 * 32 + m.bytes);  // the scale tensor travels after the codes
    }
    // Not transposed (NN): K = 32 runs along the stored columns, the outer dimension.
    const std::int32_t n = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof n);
    r = read();
    REQUIRE(r.call);
    CHECK(r.call->a.k_is_outer);
    CHECK(r.call->a.scale_bytes == 64 * 4);  // OUTER_VEC: one per M = 64
  }
  SECTION("a scale mode this library cannot have set, or none known, is counted") {
    const std::int32_t future = CUBLASLT_MATMUL_MATRIX_SCALE_END;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &future, sizeof future);
    r = read();
    CHECK_FALSE(r.call);
    CHECK(r.reason == shm::DropReason::kUnsupportedScaleMode);
  }
  SECTION("FP4 codes: two a byte, and the GEMM's alpha when it is a device pointer (TE's NVFP4)") {
    cublasLtMatrixLayout_t fp4 = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&fp4, CUDA_R_4F_E2M1, 64, 32, 64) == CUBLAS_STATUS_SUCCESS);
    const std::int32_t vec16 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, device = CUBLASLT_POINTER_MODE_DEVICE;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec16, sizeof vec16);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device, sizeof device);
    const float alpha = 0.5f;
    r = read_cublaslt_call(read_matmul_shape(desc, fp4), desc, &alpha, data, fp4, data, lb, data, lb, nullptr);
    REQUIRE(r.call);
    CHECK((r.call->a.dtype == DType::kE2M1 && r.call->a.element_bits == 4));
    CHECK(r.call->a.payload_bytes() == 64 * 32 / 2 + 128 * 4);
    CHECK(r.call->alpha.device == &alpha);
    cublasLtMatrixLayoutDestroy(fp4);
  }
  SECTION("pointer-array batches are one matrix per expert, never a plain matrix; other modes are counted") {
    const std::int32_t pointer_array = CUBLASLT_BATCH_MODE_POINTER_ARRAY, unknown = 7;
    cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &pointer_array, sizeof pointer_array);
    r = read();
    CHECK(r.reason == shm::DropReason::kUnreadableBatch);  // A is not a pointer array: the layouts disagree
    cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &pointer_array, sizeof pointer_array);
    cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches, sizeof batches);
    r = read();
    REQUIRE(r.call);
    CHECK(r.call->experts == 3);
    CHECK((r.call->a.experts == 3 && r.call->a.batch_count == 1 && r.call->a.data == data));
    CHECK((r.call->b.experts == 3 && r.call->b.shape_of(2).rows == 16 && r.call->b.shape_of(2).cols == 64));
    CHECK(host_tokens(*r.call, GemmRole::kFprop) == std::vector<std::uint64_t>(3, r.call->b.cols));  // B's N, row major or not
    // Block scales of a pointer-array batch (cuBLASLt documents them per matrix): counted.
    const std::int32_t mxfp8 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mxfp8, sizeof mxfp8);
    CHECK(read().reason == shm::DropReason::kGroupedBlockScales);
    const std::int32_t scalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scalar, sizeof scalar);
    cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &unknown, sizeof unknown);
    r = read();
    CHECK_FALSE(r.call);
    CHECK(r.reason == shm::DropReason::kUnreadableBatch);
  }
  SECTION("other layout orders are counted") {
    const std::int32_t col32 = CUBLASLT_ORDER_COL32;
    cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ORDER, &col32, sizeof col32);
    r = read();
    CHECK(r.reason == shm::DropReason::kUnsupportedLayout);
  }
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

TEST_CASE("a row-scaled NVFP4 GEMM is told by TE's unit-amax alpha, and only its activation is relabelled", "[hook]") {
  // TE's alpha kernel with both amaxes replaced by 1 (common/recipe/nvfp4.cu:75-77): 1 * 1 * 1 *
  // fp32(1 / (6 * 6 * 448 * 448)).
  const float unit = 1.0f * 1.0f * 1.0f * (1.0f / (6.0f * 6.0f * 448.0f * 448.0f));
  CHECK(row_scaled_nvfp4_alpha(unit));
  CHECK_FALSE(row_scaled_nvfp4_alpha(std::nextafter(unit, 1.0f)));
  CHECK_FALSE(row_scaled_nvfp4_alpha(3.5f * 2.0f * unit));  // an ordinary NVFP4 GEMM's amaxes
  const auto row = ScaleLayout::kVec16Ue4m3RowScaled, vec16 = ScaleLayout::kVec16Ue4m3;
  CHECK(labelled_layout(vec16, DType::kE2M1, Operand::kX, unit) == row);
  CHECK(labelled_layout(vec16, DType::kE2M1, Operand::kW, unit) == vec16);   // W's scales stay per tensor
  CHECK(labelled_layout(vec16, DType::kE2M1, Operand::kDy, unit) == vec16);  // so do Dy's
  CHECK(labelled_layout(vec16, DType::kE2M1, Operand::kX, 0.0f) == vec16);   // alpha not read
  CHECK(labelled_layout(ScaleLayout::kVec32Ue8m0, DType::kE4M3, Operand::kX, unit) == ScaleLayout::kVec32Ue8m0);
}
