// --te-config through the CLI's policy flags: a TE debug config's rules replace the policy's
// selection, the hook hears them from its environment too, and what would contradict them is refused.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "fp8scope/cli/policy_flags.h"
#include "fp8scope/wire/wire.h"
#include "support/temp_dir.h"

using namespace fp8scope;

namespace {

const std::string kConfigs = FP8SCOPE_TE_CONFIGS;

}  // namespace

TEST_CASE("a TE config (--te-config) replaces the policy's selection with the rules, and refuses what would contradict it",
          "[te_config]") {
  cli::PolicyFlags flags;
  flags.te_config = kConfigs + "/te_stats_collection.yaml";
  v1::Policy base;
  base.set_layer_regex("mlp");
  base.add_operands(v1::OPERAND_W);
  Result<v1::Policy> p = cli::apply_policy_flags(flags, base);
  REQUIRE(p.ok());
  CHECK(p.value().rules_size() == 5);  // nvdlfw's own LogTensorStats is not applied
  CHECK(p.value().layer_regex().empty());
  CHECK(p.value().operands().empty());
  CHECK(p.value().recipes_size() == 3);
  CHECK_THAT(p.value().rules(0).source(),
             Catch::Contains("te_stats_collection.yaml:16: collection_1.transformer_engine.LogTensorStats activation"));
  // The hook hears the same rules from its environment before the daemon's policy reaches it.
  const std::string env = cli::policy_environment(flags).at("FP8SCOPE_RULES");
  std::string error;
  const auto rules = parse_rules(env, &error);
  REQUIRE(rules);
  REQUIRE(rules->size() == 5);
  // The last, the fprop output's, carries its operand through the text too.
  CHECK(wire::to_wire((*rules)[4]).SerializeAsString() ==
        [&] { v1::SamplingRule r = p.value().rules(4); r.clear_source(); return r.SerializeAsString(); }());
  CHECK(p.value().rules(4).tensors(0).operand() == v1::OPERAND_OUT);

  flags.every = 5;
  CHECK_FALSE(cli::apply_policy_flags(flags, base).ok());
  cli::PolicyFlags plain;
  plain.every = 5;
  CHECK_THAT(cli::apply_policy_flags(plain, p.value()).message(), Catch::Contains("rules of a TE config"));
  plain.reset = true;  // a --reset policy starts from the default, which has no rules
  CHECK(cli::apply_policy_flags(plain, v1::Policy()).ok());

  testing::TempDir dir;
  std::ofstream(dir.file("only_fake_quant.yaml"))
      << "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n  transformer_engine:\n"
         "    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation], quant_format: FP8E4M3}\n";
  cli::PolicyFlags nothing;
  nothing.te_config = dir.file("only_fake_quant.yaml");
  CHECK_THAT(cli::apply_policy_flags(nothing, base).message(), Catch::Contains("asks for nothing fp8scope samples"));
  CHECK_THAT(cli::te_config_notes(nothing).front(), Catch::Contains("FakeQuant: changes the job's numerics: not applied"));
}
