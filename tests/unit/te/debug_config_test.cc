// TE debug-API configs as values: TE's own configs read, written and read back equal; every scalar
// keeps its text and its YAML type through the writer; and the reader stays bounded on what no
// TE config looks like (a large file, a FIFO, a device, aliases that expand without end).
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "fp8scope/te/debug_config.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using te::ConfigNode;
using te::DebugConfig;

namespace {

const std::string kConfigs = FP8SCOPE_TE_CONFIGS;

DebugConfig round_trip(const DebugConfig& c) {
  std::ostringstream yaml;
  te::write_debug_config(c, yaml);
  INFO(yaml.str());
  Result<DebugConfig> back = te::parse_debug_config(yaml.str(), "written.yaml");
  INFO(back.message());
  REQUIRE(back.ok());
  return back.value();
}

}  // namespace

TEST_CASE("TE's configs read, written and read back equal", "[debug_config]") {
  for (const char* name : {"te_log_config.yaml", "te_stats_collection.yaml", "te_getting_started.yaml"}) {
    INFO(name);
    Result<DebugConfig> read = te::read_debug_config(kConfigs + "/" + name);
    INFO(read.message());
    REQUIRE(read.ok());
    CHECK_FALSE(read.value().sections.empty());
    CHECK(round_trip(read.value()) == read.value());
  }
}

TEST_CASE("a scalar keeps its text and its type through the writer", "[debug_config]") {
  DebugConfig c;
  te::SectionConfig s;
  s.name = "odd: names#1";
  s.enabled = ConfigNode::scalar("True");
  s.layers = ConfigNode::map({{"layer_name_regex_pattern", ConfigNode::scalar("^(a\\.b|c'd)$", false)}});
  s.features.push_back({"LogFp8TensorStats", true,
                        ConfigNode::map({{"enabled", ConfigNode::scalar("True", false)},  // the string "True"
                                         {"tensors_struct",
                                          ConfigNode::list({ConfigNode::map({{"tensor", ConfigNode::scalar("activation")},
                                                                             {"stats", ConfigNode::list_of({"underflows%", "mse"})},
                                                                             {"end_step", ConfigNode::scalar("-1")}})})},
                                         {"start_end_list", ConfigNode::list({ConfigNode::list_of({"1", "5"})})},
                                         {"empty", ConfigNode::list({})},
                                         {"note", ConfigNode::scalar("- a, [b] {c}: #d")},
                                         {"blank", ConfigNode{}}})});
  s.features.push_back({"LogTensorStats", false, ConfigNode::map({{"enabled", ConfigNode::scalar("yes")}})});
  c.sections.push_back(s);
  c.leading_comments = {"written by a test"};
  const DebugConfig back = round_trip(c);
  CHECK(back == c);
  const ConfigNode& fields = back.sections[0].features[0].fields;
  CHECK_FALSE(fields.find("enabled")->plain);  // quoted stays quoted: a string, not a bool
  CHECK(fields.find("start_end_list")->items[0].items[1].text == "5");
  CHECK(back.sections[0].features[1].te_namespace == false);
}

TEST_CASE("duplicate keys and malformed YAML are refused with the file and the line", "[debug_config]") {
  Result<DebugConfig> twice = te::parse_debug_config("s:\n  enabled: true\n  enabled: false\n", "c.yaml");
  REQUIRE_FALSE(twice.ok());
  CHECK_THAT(twice.message(), Catch::Contains("c.yaml:3:") && Catch::Contains("s.enabled: given twice"));
  CHECK_THAT(te::parse_debug_config("s: [\n", "c.yaml").message(), Catch::Contains("c.yaml:") && Catch::Contains("not YAML"));
  CHECK_THAT(te::parse_debug_config("- a\n", "c.yaml").message(), Catch::Contains("expected a map of sections"));
  CHECK_THAT(te::parse_debug_config("a: 1\n---\nb: 2\n", "c.yaml").message(), Catch::Contains("2 YAML documents"));
}

TEST_CASE("values are well-formed UTF-8 and keys printable ASCII, or the file and line say why", "[debug_config]") {
  const auto value = [](const std::string& bytes) {
    return te::parse_debug_config("s:\n  enabled: true\n  layers:\n    layer_name_regex_pattern: " + bytes + "\n", "c.yaml");
  };
  for (const std::string& good : {std::string("mlp"), std::string("caf\xc3\xa9"), std::string("\xf0\x9f\x98\x80"),
                                  std::string("\xef\xbf\xbd")}) {
    CHECK(value(good).ok());
  }
  // A lone continuation byte, an overlong '/', a UTF-16 surrogate, a truncated sequence, past U+10FFFF.
  for (const std::string& bad : {std::string("a\x80"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                                 std::string("\xe2\x82"), std::string("\xf4\x90\x80\x80")}) {
    INFO(bad);
    CHECK_THAT(value(bad).message(), Catch::Contains("c.yaml:4: s.layers.layer_name_regex_pattern: not valid UTF-8"));
  }
  CHECK_THAT(te::parse_debug_config("s:\n  enabled: true\n  \x01bad: 1\n", "c.yaml").message(),
             Catch::Contains("c.yaml:3: s: a key must be printable ASCII"));
}

TEST_CASE("the reader is bounded: size before parsing, regular files only, expanded aliases counted", "[debug_config]") {
  testing::TempDir dir;
  {
    std::ofstream big(dir.file("big.yaml"));
    for (std::size_t i = 0; i * 20 <= te::kMaxDebugConfigBytes; ++i) big << "section_" << i << ": {enabled: true}\n";
  }
  CHECK_THAT(te::read_debug_config(dir.file("big.yaml")).message(), Catch::Contains("larger than 262144 bytes"));
  REQUIRE(::mkfifo(dir.file("fifo.yaml").c_str(), 0600) == 0);
  CHECK_THAT(te::read_debug_config(dir.file("fifo.yaml")).message(), Catch::Contains("not a regular file (a FIFO)"));
  CHECK_THAT(te::read_debug_config("/dev/zero").message(), Catch::Contains("not a regular file (a character device)"));
  CHECK_THAT(te::read_debug_config(dir.file("missing.yaml")).message(), Catch::Contains("cannot open"));
  // A billion laughs: nine levels of ten aliases each expand to 10^9 values.
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + p;
    for (int k = 1; k < 10; ++k) laughs += ", " + p;
    laughs += "]\n";
  }
  CHECK_THAT(te::parse_debug_config(laughs, "lol.yaml").message(), Catch::Contains("more than 50000 values"));
}
