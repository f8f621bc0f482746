// Layer patterns: the same answers as std::regex_search (ECMAScript) on the dialect they share,
// checked on thousands of generated patterns and names; then the patterns that crash or stall a
// backtracking engine, which must compile to a clear error or match in linear time.
#include <catch2/catch.hpp>

#include <random>
#include <regex>
#include <string>

#include "fp8scope/pattern/layer_pattern.h"

using fp8scope::LayerPattern;

namespace {

bool search(const std::string& pattern, const std::string& text) {
  std::string error;
  const auto p = LayerPattern::compile(pattern, &error);
  INFO(pattern << ": " << error);
  REQUIRE(p);
  return p->search(text);
}

std::string compile_error(const std::string& pattern) {
  std::string error;
  CHECK_FALSE(LayerPattern::compile(pattern, &error));
  return error;
}

// A random pattern in the shared dialect over the alphabet {a, b, ., 1}, as a layer name has; quantified
// groups only one level deep, where std::regex (the reference) stays fast.
std::string random_pattern(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::string atom;
  switch (pick(depth > 0 ? 7 : 9)) {
    case 0: atom = "a"; break;
    case 1: atom = "b"; break;
    case 2: atom = "\\."; break;
    case 3: atom = "."; break;
    case 4: atom = pick(2) ? "[ab]" : "[^a.]"; break;
    case 5: atom = pick(2) ? "\\d" : "\\w"; break;
    case 6: atom = "[0-9a]"; break;
    case 7: atom = "(" + random_pattern(rng, depth + 1) + "|" + random_pattern(rng, depth + 1) + ")"; break;
    default: atom = "(?:" + random_pattern(rng, depth + 1) + ")"; break;
  }
  static const char* quantifiers[] = {"", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?"};
  std::string out = atom + quantifiers[pick(10)];
  if (pick(3) == 0) out += random_pattern(rng, depth + 1);
  if (depth == 0 && pick(4) == 0) out = "^" + out;
  if (depth == 0 && pick(4) == 0) out += "$";
  return out;
}

std::string random_name(std::mt19937& rng) {
  static const char alphabet[] = "ab.1";
  std::string s;
  const int n = static_cast<int>(rng() % 9);
  for (int i = 0; i < n; ++i) s += alphabet[rng() % 4];
  return s;
}

}  // namespace

TEST_CASE("layer patterns agree with std::regex_search on generated patterns and names", "[pattern]") {
  std::mt19937 rng(20261130);
  int matched = 0, compared = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string pattern = random_pattern(rng, 0);
    const std::regex reference(pattern, std::regex::ECMAScript);
    std::string error;
    const auto compiled = LayerPattern::compile(pattern, &error);
    INFO(pattern << ": " << error);
    REQUIRE(compiled);
    for (int j = 0; j < 12; ++j) {
      const std::string name = random_name(rng);
      INFO("name '" << name << "'");
      const bool expected = std::regex_search(name, reference);
      REQUIRE(compiled->search(name) == expected);
      matched += expected;
      ++compared;
    }
  }
  // Both outcomes are common, so agreement is not agreement on "always" or "never".
  CHECK(matched > compared / 5);
  CHECK(matched < compared * 4 / 5);
}

TEST_CASE("the patterns users write for layer names", "[pattern]") {
  CHECK(search("", "anything"));
  CHECK(search("attn", "model.layers.3.self_attn.qkv"));
  CHECK(search("^model\\.layers\\.(1|2)\\.", "model.layers.2.mlp"));
  CHECK_FALSE(search("^model\\.layers\\.(1|2)\\.", "model.layers.12.mlp"));
  CHECK(search("layers\\.[0-9]+\\.mlp\\.fc[12]$", "model.layers.31.mlp.fc2"));
  CHECK_FALSE(search("layers\\.[0-9]+\\.mlp\\.fc[12]$", "model.layers.31.mlp.fc2.bias"));
  CHECK(search("layers\\.\\d{2}\\.", "layers.10.x"));
  CHECK_FALSE(search("layers\\.\\d{2}\\.", "layers.1.x"));
  CHECK(search("(?:q|k|v)_proj", "layers.0.k_proj"));
  CHECK(search("a{2,}", "baab"));
  CHECK(search("x{,2}", "x{,2}"));  // not a well-formed count: literal braces, as in RE2
  CHECK(search("[\\]]", "a]"));
  CHECK(search("[a-]", "-"));
  CHECK(search("\\s", "a b"));
  CHECK_FALSE(search("\\S", "   "));
  CHECK(search("[^\\d]", "12x"));
}

TEST_CASE("what is outside the dialect is an error that says where", "[pattern]") {
  CHECK(compile_error("(") == "missing ')' at offset 1");
  CHECK(compile_error("a)") == "unmatched ')' at offset 1");
  CHECK(compile_error("*a") == "nothing to repeat before the quantifier at offset 0");
  CHECK(compile_error("a**").find("a quantifier of a quantifier") == 0);
  CHECK(compile_error("[b-a]").find("a range out of order") == 0);
  CHECK(compile_error("[]a]").find("an empty class") == 0);
  CHECK(compile_error("[ab").find("missing ']'") == 0);
  CHECK(compile_error("(a)\\1").find("backreferences") == 0);
  CHECK(compile_error("\\bx").find("\\b (word boundaries) is not supported") == 0);
  CHECK(compile_error("(?=a)").find("only (?: groups") == 0);
  CHECK(compile_error("a{3,2}").find("{m,n} with n below m") == 0);
  CHECK(compile_error("a\\").find("a trailing backslash") == 0);
  CHECK(compile_error("\\q").find("an unknown escape \\q") == 0);
}

TEST_CASE("hostile patterns are refused or matched in linear time, never a crash", "[pattern]") {
  // 30,000 nested groups (60 KB) overflow std::regex's stack; here: too long, then too deep.
  const std::string nested = std::string(30000, '(') + std::string(30000, ')');
  CHECK(compile_error(nested) == "longer than 1000 bytes");
  const std::string deep = std::string(200, '(') + "a" + std::string(200, ')');
  CHECK(compile_error(deep).find("groups nested deeper than 100") == 0);
  // Repetition counts that would expand beyond the program bound.
  CHECK(compile_error("(a{1000}){1000}").find("too complex") == 0);
  CHECK(compile_error("a{1001}").find("a repetition count above 1000") == 0);
  // Exponential for a backtracking engine: here one pass over the name per program step.
  const std::string as(100000, 'a');
  CHECK_FALSE(search("^(a|a)*c$", as));
  CHECK_FALSE(search("(a*)*b", as));
  CHECK_FALSE(search("^(a+)+$", as + "!"));
  CHECK(search("^(a|a)*$", as));
  const auto big = LayerPattern::compile("(a?){500}a{500}", nullptr);
  REQUIRE(big);
  CHECK(big->program_size() <= LayerPattern::kMaxProgram);
  CHECK(big->search(std::string(500, 'a')));
}
