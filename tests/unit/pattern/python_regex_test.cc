// Python `re` patterns as layer patterns: every translated pattern selects exactly the names
// Python's own re.search does (Debian's /usr/bin/python3 is the oracle, run once on the whole
// table), the constructs with no equivalent are refused with a reason, and nvdlfw_inspect's
// layer_numbers pattern agrees with an independent model of re.findall(r"(?<!fc)\d+") on every name
// up to 7 characters over the alphabet that matters.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/pattern/python_regex.h"

using fp8scope::LayerPattern;

namespace {

const std::vector<std::string> kPythonPatterns = {
    ".*", "fc1", ".*(fc1|self_attention).*", "^decoder\\.\\d+\\.mlp", "layers\\.[0-3]\\.", "fc[12]$",
    "(?P<block>blocks)\\.\\d{1,2}\\.", "(?:attn|mlp)\\.(qkv|proj|fc\\d)", "\\Aencoder", "linear\\Z", "[^.]+\\.fc2",
    "a{,2}b", "x{2,}", "{literal}", "a{}", "a{1,x}", "[]a]", "[a-]", "[\\]\\\\]", "[\\w.-]+$", "\\x2e", "(?s).fc",
    "(?a)\\w+_(\\d)", "(?#a comment)mlp", "(?m:^mlp)", "qkv??", "proj*?$", "\\-\\_", "[\\d-]", "[a\\-z]", "[.]",
    "(|mlp)", "layer_(one|two)", "self attention", "[^\\s]+", "\\S\\s?\\S", "[\\W]"};

const std::vector<std::string> kNames = {
    "",           "fc1",          "fc12",          "decoder.3.mlp.fc1",  "decoder.12.mlp.fc2", "layers.2.self_attention.qkv",
    "layers.7.x", "blocks.10.fc", "encoder.layer", "x.linear",          "aab",                "b",
    "xxx",        "{literal}",    "a{}",           "a{1,x}",            "]",                  "a-",
    "\\",         "]x",           "w.v-1",         "mlp.fc2",           "attn.qkv",           "attn.fc3",
    "a_1",        "qk",           "pro",           "-_",                "layer_two",          "self attention",
    "a b",        "x.y",          "-",             "...",               "q.fc",               "mlp"};

// Python's re.search of every pattern on every name, as a row of 0/1 a pattern.
std::vector<std::string> python_answers() {
  char dir[] = "/tmp/python_regex_test.XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string base(dir);
  {
    std::ofstream patterns(base + "/patterns"), names(base + "/names");
    for (const std::string& p : kPythonPatterns) patterns << p << "\n";
    for (const std::string& n : kNames) names << n << "\n";
  }
  const std::string script =
      "import re,sys\n"
      "ps=open(sys.argv[1]).read().split('\\n')[:-1]\n"
      "ns=open(sys.argv[2]).read().split('\\n')[:-1]\n"
      "for p in ps: print(''.join('1' if re.search(p, n) else '0' for n in ns))\n";
  { std::ofstream(base + "/oracle.py") << script; }
  const std::string command = "/usr/bin/python3 " + base + "/oracle.py " + base + "/patterns " + base + "/names";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::vector<std::string> rows;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) rows.emplace_back(line, std::strlen(line) - 1);
  REQUIRE(pclose(pipe) == 0);
  std::system(("rm -rf " + base).c_str());
  REQUIRE(rows.size() == kPythonPatterns.size());
  return rows;
}

// The numbers re.findall(r"(?<!fc)\d+", name) returns, modelled by hand: a run of digits yields
// itself, except that a digit right after "fc" is skipped (the rest of its run yields).
std::vector<std::string> findall_layer_numbers(const std::string& name) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < name.size()) {
    if (!std::isdigit(static_cast<unsigned char>(name[i])) || (i >= 2 && name.compare(i - 2, 2, "fc") == 0)) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    out.push_back(name.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

TEST_CASE("translated Python patterns select what Python's re.search selects", "[pattern]") {
  const std::vector<std::string> python = python_answers();
  for (std::size_t p = 0; p < kPythonPatterns.size(); ++p) {
    std::string error;
    const std::optional<std::string> translated = fp8scope::translate_python_regex(kPythonPatterns[p], &error);
    INFO(kPythonPatterns[p] << " -> " << translated.value_or("(refused: " + error + ")"));
    REQUIRE(translated);
    const std::optional<LayerPattern> compiled = LayerPattern::compile(*translated, &error);
    REQUIRE(compiled);
    for (std::size_t n = 0; n < kNames.size(); ++n) {
      INFO("name '" << kNames[n] << "'");
      CHECK(compiled->search(kNames[n]) == (python[p][n] == '1'));
    }
  }
}

TEST_CASE("Python constructs with no exact equivalent are refused with the reason", "[pattern]") {
  const std::pair<const char*, const char*> refused[] = {
      {"(?=mlp)", "lookaround"},         {"(?<!fc)\\d+", "lookaround"},   {"(a)\\1", "backreferences"},
      {"(?P<x>a)(?P=x)", "backreferences"}, {"\\bfc", "word boundaries"}, {"(?i)MLP", "case-insensitive"},
      {"(?x) m l p", "verbose"},         {"(?>a)", "atomic"},             {"a*+", "possessive"},
      {"a**", "multiple repeat"},        {"*a", "nothing to repeat"},     {"\\u00e9", "no equivalent"},
      {"caf\xc3\xa9", "printable ASCII"}, {"[a", "unterminated"},        {"(a", "missing ')'"},
      {"a)", "unbalanced"},              {"[z-a]", "out of order"},       {"a{2000}", "not a layer pattern"}};
  for (const auto& [pattern, reason] : refused) {
    std::string error;
    INFO(pattern);
    CHECK_FALSE(fp8scope::translate_python_regex(pattern, &error));
    CHECK_THAT(error, Catch::Contains(reason));
  }
}

TEST_CASE("literal patterns match the text itself, punctuation and all", "[pattern]") {
  for (const std::string text : {"decoder.1.mlp.fc1", "a+b(c)[d]{e}|f^g$h\\i*j?k", "-_ /"}) {
    std::string error;
    const auto p = LayerPattern::compile(fp8scope::literal_pattern(text), &error);
    REQUIRE(p);
    CHECK(p->search("x" + text + "y"));
    CHECK_FALSE(p->search(text.substr(1)));
  }
}

TEST_CASE("layer_numbers selects a name when its one number, as nvdlfw_inspect finds it, is listed", "[pattern]") {
  // Every name up to 7 characters over the characters that decide: f, c and a separator, digits.
  const std::string alphabet = "fc.102";
  for (const std::vector<std::uint64_t>& numbers :
       {std::vector<std::uint64_t>{1}, std::vector<std::uint64_t>{0, 2, 12}, std::vector<std::uint64_t>{}}) {
    std::string error;
    const std::optional<std::string> pattern = fp8scope::layer_number_pattern(numbers, &error);
    REQUIRE(pattern);
    const std::optional<LayerPattern> compiled = LayerPattern::compile(*pattern, &error);
    REQUIRE(compiled);
    const std::set<std::uint64_t> wanted(numbers.begin(), numbers.end());
    std::size_t checked = 0, selected = 0;
    std::vector<std::size_t> digits;
    for (std::size_t length = 0; length <= 7; ++length) {
      digits.assign(length, 0);
      while (true) {
        std::string name;
        for (std::size_t d : digits) name += alphabet[d];
        const std::vector<std::string> found = findall_layer_numbers(name);
        const bool expected = found.size() == 1 && (wanted.empty() || wanted.count(std::stoull(found[0])) > 0);
        INFO(*pattern << " on '" << name << "'");
        REQUIRE(compiled->search(name) == expected);
        ++checked, selected += expected;
        std::size_t k = 0;
        while (k < length && ++digits[k] == alphabet.size()) digits[k++] = 0;
        if (k == length) break;
      }
    }
    CHECK(checked == 335923);  // 6^0 + ... + 6^7
    CHECK(selected > 1000);
  }
  // The names nvdlfw_inspect's own tests and docs use.
  const auto selects = [](std::vector<std::uint64_t> numbers, const std::string& name) {
    std::string error;
    return LayerPattern::compile(*fp8scope::layer_number_pattern(numbers, &error), &error)->search(name);
  };
  CHECK(selects({12}, "decoder.12.mlp.fc1"));
  CHECK(selects({3}, "decoder.3.attn.qkv"));
  CHECK_FALSE(selects({3}, "model.layers.3.mlp.fc12"));  // findall finds 3 and 2: nvdlfw_inspect raises
  CHECK_FALSE(selects({1}, "transformer_layer.self_attn.proj"));
}
