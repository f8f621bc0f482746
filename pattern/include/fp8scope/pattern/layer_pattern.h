// Layer-name patterns: the regular expressions of a sampling policy and of history queries.
//
// Patterns come from anyone who can reach the Admin API and run inside the training process (the
// hook) and the daemon, so matching must take time linear in the name and compiling must not
// recurse on the pattern's depth without a bound. std::regex does neither (a 60 KB pattern of
// nested groups overflows its stack; `^(a|a)*c$` backtracks exponentially). This is a Thompson
// NFA simulated breadth-first (Pike's VM without captures): O(name length x program size), with
// the program size bounded at compile time. Dependency-free, so the hook can carry it.
//
// The dialect is the common subset of ECMAScript and RE2 (docs/operations.md, "Layer patterns"):
// literals; `.`; classes `[a-z_]`, `[^0-9]`; `\d \w \s \D \W \S`; escaped punctuation; `\t \n \r`;
// groups `(...)` and `(?:...)`; `|`; `* + ?` and `{m}`, `{m,}`, `{m,n}` (lazy forms accepted, the
// same answer); anchors `^` and `$`. Search semantics, like std::regex_search: a name is selected
// when the pattern matches anywhere in it. No backreferences, lookaround or word boundaries.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8scope {

class LayerPattern {
 public:
  static constexpr std::size_t kMaxPatternBytes = 1000;
  static constexpr std::size_t kMaxProgram = 4000;  // instructions, after repetitions are expanded
  static constexpr int kMaxNesting = 100;           // groups inside groups
  static constexpr int kMaxRepeat = 1000;           // the largest m or n in {m,n}

  // The compiled pattern, or nullopt with a message naming the offset of the problem.
  static std::optional<LayerPattern> compile(std::string_view pattern, std::string* error);

  // Whether the pattern matches somewhere in text.
  bool search(std::string_view text) const;

  std::size_t program_size() const { return program_.size(); }

  enum class Op : std::uint8_t { kByte, kSplit, kJump, kLineStart, kLineEnd, kMatch };
  struct Instruction {
    Op op;
    std::uint32_t x = 0, y = 0;  // kByte: the class; kSplit: both targets; kJump: x
  };

 private:
  friend class LayerPatternCompiler;
  std::vector<Instruction> program_;
  std::vector<std::bitset<256>> classes_;
};

}  // namespace fp8scope
