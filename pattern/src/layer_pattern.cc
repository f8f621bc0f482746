#include "fp8scope/pattern/layer_pattern.h"

#include <memory>

namespace fp8scope {
namespace {

struct Node {
  enum class Kind { kByte, kLineStart, kLineEnd, kConcat, kAlternation, kRepeat };
  explicit Node(Kind k, std::uint32_t c = 0) : kind(k), byte_class(c) {}
  Kind kind;
  std::uint32_t byte_class;
  int min = 0, max = 0;  // kRepeat; max -1 = unbounded
  std::vector<Node> children;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

// Recursive descent into a syntax tree, then Thompson's construction into program_. Every error
// stops both at once: the first message wins.
class LayerPatternCompiler {
 public:
  LayerPatternCompiler(std::string_view pattern, LayerPattern& out) : p_(pattern), out_(out) {}

  bool run(std::string* error) {
    if (p_.size() > LayerPattern::kMaxPatternBytes) {
      error_ = "longer than " + std::to_string(LayerPattern::kMaxPatternBytes) + " bytes";
    } else {
      Node root = alternation(0);
      if (ok() && pos_ < p_.size()) fail("unmatched ')'");
      if (ok()) emit(root);
      if (ok()) push({LayerPattern::Op::kMatch});
    }
    if (!ok() && error != nullptr) *error = error_;
    return ok();
  }

 private:
  bool ok() const { return error_.empty(); }
  bool done() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }

  Node fail(const std::string& what) {
    if (ok()) error_ = what + " at offset " + std::to_string(pos_);
    return Node{Node::Kind::kConcat};
  }

  std::uint32_t add_class(const std::bitset<256>& c) {
    out_.classes_.push_back(c);
    return static_cast<std::uint32_t>(out_.classes_.size() - 1);
  }
  Node byte_node(const std::bitset<256>& c) { return Node{Node::Kind::kByte, add_class(c)}; }

  Node alternation(int depth) {
    Node first = concatenation(depth);
    if (!ok() || done() || peek() != '|') return first;
    Node alt{Node::Kind::kAlternation};
    alt.children.push_back(std::move(first));
    while (ok() && !done() && peek() == '|') {
      ++pos_;
      alt.children.push_back(concatenation(depth));
    }
    return alt;
  }

  Node concatenation(int depth) {
    Node seq{Node::Kind::kConcat};
    while (ok() && !done() && peek() != '|' && peek() != ')') seq.children.push_back(repetition(depth));
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    return seq;
  }

  // {m}, {m,} or {m,n} at pos_, consumed when well formed (otherwise '{' is a literal, as in RE2).
  bool counted_repeat(int* min, int* max) {
    std::size_t i = pos_ + 1;
    auto number = [&](int* v) {
      const std::size_t start = i;
      long long n = 0;
      while (i < p_.size() && is_digit(p_[i]) && i - start < 6) n = n * 10 + (p_[i++] - '0');
      *v = static_cast<int>(n);
      return i > start && (i >= p_.size() || !is_digit(p_[i]));
    };
    if (!number(min)) return false;
    *max = *min;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      *max = -1;
      if (i < p_.size() && is_digit(p_[i]) && !number(max)) return false;
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    pos_ = i + 1;
    return true;
  }

  bool quantifier(int* min, int* max) {
    if (done()) return false;
    switch (peek()) {
      case '*': *min = 0, *max = -1, ++pos_; return true;
      case '+': *min = 1, *max = -1, ++pos_; return true;
      case '?': *min = 0, *max = 1, ++pos_; return true;
      case '{': return counted_repeat(min, max);
      default: return false;
    }
  }

  Node repetition(int depth) {
    const bool anchor = !done() && (peek() == '^' || peek() == '$');
    Node atom_node = atom(depth);
    int min = 0, max = 0;
    if (!ok() || !quantifier(&min, &max)) return atom_node;
    if (anchor) return fail("nothing to repeat before the quantifier");
    if (max != -1 && max < min) return fail("{m,n} with n below m");
    if (min > LayerPattern::kMaxRepeat || max > LayerPattern::kMaxRepeat) {
      return fail("a repetition count above " + std::to_string(LayerPattern::kMaxRepeat));
    }
    if (!done() && peek() == '?') ++pos_;  // lazy: the same set of names matches
    int unused_min = 0, unused_max = 0;
    if (quantifier(&unused_min, &unused_max)) return fail("a quantifier of a quantifier");
    Node r{Node::Kind::kRepeat};
    r.min = min;
    r.max = max;
    r.children.push_back(std::move(atom_node));
    return r;
  }

  Node atom(int depth) {
    const char c = p_[pos_];
    switch (c) {
      case '(': {
        if (depth + 1 > LayerPattern::kMaxNesting) {
          return fail("groups nested deeper than " + std::to_string(LayerPattern::kMaxNesting));
        }
        ++pos_;
        if (!done() && peek() == '?') {
          if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            return fail("only (?: groups are supported (no lookaround or named groups)");
          }
        }
        Node inner = alternation(depth + 1);
        if (!ok()) return inner;
        if (done() || peek() != ')') return fail("missing ')'");
        ++pos_;
        return inner;
      }
      case '[': return bracket_class();
      case '.': {
        ++pos_;
        std::bitset<256> any;
        any.set();
        any.reset('\n');
        return byte_node(any);
      }
      case '^': ++pos_; return Node{Node::Kind::kLineStart};
      case '$': ++pos_; return Node{Node::Kind::kLineEnd};
      case '\\': {
        std::bitset<256> set;
        if (!escape(&set, false)) return Node{Node::Kind::kConcat};
        return byte_node(set);
      }
      case '*':
      case '+':
      case '?': return fail("nothing to repeat before the quantifier");
      case '{': {
        int min = 0, max = 0;
        const std::size_t at = pos_;
        if (counted_repeat(&min, &max)) {
          pos_ = at;
          return fail("nothing to repeat before the quantifier");
        }
        break;
      }
      default: break;
    }
    ++pos_;
    std::bitset<256> one;
    one.set(static_cast<unsigned char>(c));
    return byte_node(one);
  }

  // After a backslash: the bytes it stands for. In a class, `\b` etc. stay errors too.
  bool escape(std::bitset<256>* set, bool in_class) {
    ++pos_;
    if (done()) {
      fail("a trailing backslash");
      return false;
    }
    const char c = p_[pos_++];
    auto range = [&](char lo, char hi) {
      for (int b = lo; b <= hi; ++b) set->set(static_cast<unsigned char>(b));
    };
    switch (c) {
      case 'd': case 'D': range('0', '9'); break;
      case 'w': case 'W': range('0', '9'), range('a', 'z'), range('A', 'Z'), set->set('_'); break;
      case 's': case 'S': for (char w : {' ', '\t', '\n', '\r', '\f', '\v'}) set->set(static_cast<unsigned char>(w)); break;
      case 't': set->set('\t'); return true;
      case 'n': set->set('\n'); return true;
      case 'r': set->set('\r'); return true;
      case 'f': set->set('\f'); return true;
      case 'v': set->set('\v'); return true;
      default:
        if (c == 'b' || c == 'B') {
          fail(std::string("\\") + c + (in_class ? " in a class" : " (word boundaries)") + " is not supported");
          return false;
        }
        if (is_digit(c)) {
          fail("backreferences and octal escapes are not supported");
          return false;
        }
        if (is_letter(c) || static_cast<unsigned char>(c) >= 0x80) {
          fail(std::string("an unknown escape \\") + c);
          return false;
        }
        set->set(static_cast<unsigned char>(c));
        return true;
    }
    if (c == 'D' || c == 'W' || c == 'S') set->flip();
    return true;
  }

  Node bracket_class() {
    ++pos_;
    std::bitset<256> set;
    const bool negated = !done() && peek() == '^';
    if (negated) ++pos_;
    if (!done() && peek() == ']') return fail("an empty class (write a literal ']' as \\])");
    while (ok() && !done() && peek() != ']') {
      std::bitset<256> item;
      const bool escaped = peek() == '\\';
      unsigned char lo = static_cast<unsigned char>(peek());
      if (escaped) {
        if (!escape(&item, true)) return Node{Node::Kind::kConcat};
      } else {
        ++pos_;
        item.set(lo);
      }
      const bool single = item.count() == 1;
      if (single && escaped) {
        for (int b = 0; b < 256; ++b)
          if (item.test(b)) lo = static_cast<unsigned char>(b);
      }
      if (pos_ + 1 < p_.size() && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (!single) return fail("a range that starts with a class escape");
        if (peek() == '\\') return fail("a range that ends with an escape");
        const auto hi = static_cast<unsigned char>(p_[pos_++]);
        if (hi < lo) return fail("a range out of order");
        for (int b = lo; b <= hi; ++b) item.set(static_cast<std::size_t>(b));
      }
      set |= item;
    }
    if (!ok()) return Node{Node::Kind::kConcat};
    if (done()) return fail("missing ']'");
    ++pos_;
    if (negated) set.flip();
    return byte_node(set);
  }

  std::uint32_t here() const { return static_cast<std::uint32_t>(out_.program_.size()); }

  std::uint32_t push(LayerPattern::Instruction i) {
    if (out_.program_.size() >= LayerPattern::kMaxProgram) {
      if (ok()) {
        error_ = "too complex: more than " + std::to_string(LayerPattern::kMaxProgram) +
                 " instructions once repetitions are expanded";
      }
      return 0;
    }
    out_.program_.push_back(i);
    return here() - 1;
  }
  void patch_y(std::uint32_t at) {
    if (ok()) out_.program_[at].y = here();
  }

  void emit(const Node& n) {
    using Op = LayerPattern::Op;
    if (!ok()) return;
    switch (n.kind) {
      case Node::Kind::kByte: push({Op::kByte, n.byte_class}); return;
      case Node::Kind::kLineStart: push({Op::kLineStart}); return;
      case Node::Kind::kLineEnd: push({Op::kLineEnd}); return;
      case Node::Kind::kConcat:
        for (const Node& c : n.children) emit(c);
        return;
      case Node::Kind::kAlternation: {
        std::vector<std::uint32_t> jumps;
        for (std::size_t i = 0; i + 1 < n.children.size() && ok(); ++i) {
          const std::uint32_t split = push({Op::kSplit, here() + 1});
          emit(n.children[i]);
          jumps.push_back(push({Op::kJump}));
          patch_y(split);
        }
        emit(n.children.back());
        for (std::uint32_t j : jumps)
          if (ok()) out_.program_[j].x = here();
        return;
      }
      case Node::Kind::kRepeat: {
        const Node& body = n.children[0];
        for (int i = 0; i < n.min && ok(); ++i) emit(body);
        if (n.max == -1) {
          const std::uint32_t loop = push({Op::kSplit, here() + 1});
          emit(body);
          push({Op::kJump, loop});
          patch_y(loop);
          return;
        }
        std::vector<std::uint32_t> splits;
        for (int i = n.min; i < n.max && ok(); ++i) {
          splits.push_back(push({Op::kSplit, here() + 1}));
          emit(body);
        }
        for (std::uint32_t s : splits) patch_y(s);
        return;
      }
    }
  }

  std::string_view p_;
  LayerPattern& out_;
  std::size_t pos_ = 0;
  std::string error_;
};

std::optional<LayerPattern> LayerPattern::compile(std::string_view pattern, std::string* error) {
  LayerPattern compiled;
  if (!LayerPatternCompiler(pattern, compiled).run(error)) return std::nullopt;
  return compiled;
}

// Pike's VM: every thread alive at a position is in one list, each instruction at most once, so a
// step costs at most the program size. A thread starts at every position (search, not match).
bool LayerPattern::search(std::string_view text) const {
  const std::size_t n = program_.size();
  std::vector<std::uint32_t> current, next, stack;
  current.reserve(n);
  next.reserve(n);
  std::vector<std::size_t> in_list(n, static_cast<std::size_t>(-1));  // the position whose list holds it
  // The epsilon closure of pc into list at position pos; true when it reaches kMatch.
  auto add = [&](std::vector<std::uint32_t>& list, std::uint32_t pc, std::size_t pos) {
    stack.push_back(pc);
    while (!stack.empty()) {
      const std::uint32_t at = stack.back();
      stack.pop_back();
      if (in_list[at] == pos) continue;
      in_list[at] = pos;
      const Instruction& i = program_[at];
      switch (i.op) {
        case Op::kByte: list.push_back(at); break;
        case Op::kMatch: stack.clear(); return true;
        case Op::kJump: stack.push_back(i.x); break;
        case Op::kSplit: stack.push_back(i.y), stack.push_back(i.x); break;
        case Op::kLineStart:
          if (pos == 0) stack.push_back(at + 1);
          break;
        case Op::kLineEnd:
          if (pos == text.size()) stack.push_back(at + 1);
          break;
      }
    }
    return false;
  };
  for (std::size_t pos = 0;; ++pos) {
    if (add(current, 0, pos)) return true;
    if (pos == text.size()) return false;
    const auto byte = static_cast<unsigned char>(text[pos]);
    next.clear();
    for (std::uint32_t pc : current) {
      if (classes_[program_[pc].x].test(byte) && add(next, pc + 1, pos + 1)) return true;
    }
    current.swap(next);
  }
}

}  // namespace fp8scope
