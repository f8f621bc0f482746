#include "fp8scope/pattern/python_regex.h"

#include <algorithm>
#include <bitset>
#include <cctype>

#include "fp8scope/pattern/layer_pattern.h"

namespace fp8scope {
namespace {

bool printable(unsigned char c) { return c >= 0x20 && c <= 0x7e; }

// One byte as a layer pattern's literal, in or out of a class.
std::string literal(unsigned char c) {
  switch (c) {
    case '\t': return "\\t";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\f': return "\\f";
    case '\v': return "\\v";
    default: break;
  }
  if (std::isalnum(c)) return std::string(1, static_cast<char>(c));
  return std::string("\\") + static_cast<char>(c);
}

// Python's sre_parse, reduced to what layer patterns can say; every other construct is refused.
class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  std::optional<std::string> run(std::string* error) {
    while (ok() && i_ < p_.size()) item();
    if (ok() && depth_ != 0) fail("missing ')'");
    if (!ok()) {
      if (error) *error = "offset " + std::to_string(error_at_) + ": " + error_;
      return std::nullopt;
    }
    return out_;
  }

 private:
  bool ok() const { return error_.empty(); }
  void fail(const std::string& why) {
    if (ok()) error_ = why, error_at_ = i_;
  }
  char peek(std::size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : '\0'; }

  void atom(const std::string& text) {
    out_ += text;
    can_repeat_ = true;
    repeated_ = false;
  }

  void item() {
    const char c = p_[i_];
    switch (c) {
      case '\\': return escape();
      case '[': return bracket_class();
      case '(': return open_group();
      case ')':
        if (depth_ == 0) return fail("unbalanced ')'");
        --depth_, ++i_;
        return atom(")");
      case '|':
        ++i_, out_ += "|", can_repeat_ = false;
        return;
      case '^': case '$':
        ++i_, out_ += c, can_repeat_ = false;  // Python repeats anchors; nothing here needs it
        return;
      case '.': ++i_; return atom(".");
      case '*': case '+': case '?': return quantifier(std::string(1, c), 1);
      case '{': {
        std::string q;
        const std::size_t length = counted_repeat(&q);
        if (length > 0) return quantifier(q, length);
        ++i_;
        return atom("\\{");  // Python reads a '{' that starts no count as a literal
      }
      default: break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (!printable(u)) return fail("a literal that is not printable ASCII can never match a layer name");
    ++i_;
    atom(literal(u));
  }

  // The length of a Python count at i_ ({m}, {m,}, {,n}, {m,n}, {,}) and its layer-pattern form;
  // 0 when '{' starts none (then it is a literal).
  std::size_t counted_repeat(std::string* q) const {
    std::size_t j = i_ + 1;
    std::string lo, hi;
    while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) lo += p_[j++];
    bool comma = false;
    if (j < p_.size() && p_[j] == ',') {
      comma = true, ++j;
      while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) hi += p_[j++];
    }
    if (j >= p_.size() || p_[j] != '}' || (!comma && lo.empty())) return 0;
    *q = "{" + (lo.empty() ? "0" : lo) + (comma ? "," + hi : "") + "}";
    return j + 1 - i_;
  }

  void quantifier(const std::string& q, std::size_t length) {
    if (!can_repeat_) return fail(repeated_ ? "multiple repeat" : "nothing to repeat");
    i_ += length;
    out_ += q;
    can_repeat_ = false;
    repeated_ = true;
    if (peek() == '?') {
      ++i_;
      out_ += "?";  // lazy: the same names are selected
    } else if (peek() == '+') {
      fail("possessive quantifiers have no equivalent");
    }
  }

  // Adds what an escape at i_ (after the backslash) stands for to `set`; false when it stands for
  // no set of bytes (anchors are handled by the caller).
  bool escape_set(std::bitset<256>& set, bool in_class) {
    const char c = peek(1);
    std::bitset<256> cls;
    auto range = [&](char lo, char hi) {
      for (int b = lo; b <= hi; ++b) cls.set(static_cast<unsigned char>(b));
    };
    switch (c) {
      case '\0':
        fail("a trailing backslash");
        return false;
      case 'd': case 'D': range('0', '9'); break;
      case 'w': case 'W': range('0', '9'), range('a', 'z'), range('A', 'Z'), cls.set('_'); break;
      case 's': case 'S': for (char w : {' ', '\t', '\n', '\r', '\f', '\v'}) cls.set(static_cast<unsigned char>(w)); break;
      case 'n': set.set('\n'), i_ += 2; return true;
      case 't': set.set('\t'), i_ += 2; return true;
      case 'r': set.set('\r'), i_ += 2; return true;
      case 'f': set.set('\f'), i_ += 2; return true;
      case 'v': set.set('\v'), i_ += 2; return true;
      case 'x': {
        const std::string hex(p_.substr(std::min(p_.size(), i_ + 2), 2));
        if (hex.size() != 2 || !std::isxdigit(static_cast<unsigned char>(hex[0])) ||
            !std::isxdigit(static_cast<unsigned char>(hex[1]))) {
          fail("\\x needs two hex digits");
          return false;
        }
        set.set(static_cast<std::size_t>(std::stoi(hex, nullptr, 16)));
        i_ += 4;
        return true;
      }
      default:
        if (c == 'b' && in_class) {
          fail("\\b in a class (a backspace) can never match a layer name");
        } else if (c == 'b' || c == 'B') {
          fail("word boundaries (\\b, \\B) have no equivalent");
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
          fail("backreferences and octal escapes have no equivalent");
        } else if (std::isalpha(static_cast<unsigned char>(c)) || !printable(static_cast<unsigned char>(c))) {
          fail(std::string("the escape \\") + c + " has no equivalent");
        } else {
          set.set(static_cast<unsigned char>(c));
          i_ += 2;
          return true;
        }
        return false;
    }
    if (c == 'D' || c == 'W' || c == 'S') cls.flip();
    set |= cls;
    i_ += 2;
    return true;
  }

  void escape() {
    const char c = peek(1);
    if (c == 'A' || c == 'Z') {  // start and end of the string: a name has no newline
      i_ += 2, out_ += c == 'A' ? "^" : "$", can_repeat_ = false;
      return;
    }
    std::bitset<256> set;
    if (!escape_set(set, false)) return;
    atom(class_of(set, false));
  }

  // A set of bytes as a layer pattern: one literal, or a class listing its printable members
  // (bytes no name holds are left out of a positive class, which selects the same names).
  static std::string class_of(std::bitset<256> set, bool negated) {
    if (!negated && set.count() == 1) {
      for (int b = 0; b < 256; ++b)
        if (set.test(static_cast<std::size_t>(b))) return literal(static_cast<unsigned char>(b));
    }
    std::string members;
    for (int b = 0; b < 256; ++b) {
      const auto u = static_cast<unsigned char>(b);
      const bool control_escape = std::string_view("\t\n\r\f\v").find(static_cast<char>(u)) != std::string_view::npos;
      if (!set.test(u) || (!printable(u) && !control_escape)) continue;
      int e = b;  // a run of letters or digits becomes a range (neither runs into the other in ASCII)
      while (std::isalnum(u) && e + 1 < 256 && set.test(static_cast<std::size_t>(e + 1)) && std::isalnum(e + 1)) ++e;
      members += literal(u);
      if (e > b + 1) members += "-";
      if (e > b) members += literal(static_cast<unsigned char>(e));
      b = e;
    }
    if (members.empty()) return negated ? "[\\s\\S]" : "[^\\s\\S]";  // everything, or nothing at all
    return std::string("[") + (negated ? "^" : "") + members + "]";
  }

  void bracket_class() {
    const std::size_t start = i_++;
    const bool negated = peek() == '^';
    if (negated) ++i_;
    std::bitset<256> set;
    bool first = true;
    while (ok()) {
      if (i_ >= p_.size()) {
        i_ = start;
        return fail("an unterminated class");
      }
      if (peek() == ']' && !first) break;
      first = false;
      std::bitset<256> lo_set;
      if (peek() == '\\') {
        if (!escape_set(lo_set, true)) return;
      } else {
        lo_set.set(static_cast<unsigned char>(p_[i_++]));
      }
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        if (lo_set.count() != 1) return fail("a range that starts with a class");
        ++i_;
        std::bitset<256> hi_set;
        if (peek() == '\\') {
          if (!escape_set(hi_set, true)) return;
        } else {
          hi_set.set(static_cast<unsigned char>(p_[i_++]));
        }
        if (hi_set.count() != 1) return fail("a range that ends with a class");
        int lo = 0, hi = 0;
        for (int b = 0; b < 256; ++b) {
          if (lo_set.test(static_cast<std::size_t>(b))) lo = b;
          if (hi_set.test(static_cast<std::size_t>(b))) hi = b;
        }
        if (hi < lo) return fail("a range out of order");
        for (int b = lo; b <= hi; ++b) set.set(static_cast<std::size_t>(b));
      } else {
        set |= lo_set;
      }
    }
    ++i_;
    atom(class_of(set, negated));
  }

  void open_group() {
    if (peek(1) != '?') {
      ++i_, ++depth_, out_ += "(", can_repeat_ = false, repeated_ = false;
      return;
    }
    const char kind = peek(2);
    if (kind == ':') {
      i_ += 3, ++depth_, out_ += "(?:", can_repeat_ = false, repeated_ = false;
      return;
    }
    if (kind == 'P' && peek(3) == '<') {  // a named group: the name changes nothing selected
      const std::size_t close = p_.find('>', i_);
      if (close == std::string_view::npos) return fail("an unterminated group name");
      i_ = close + 1, ++depth_, out_ += "(", can_repeat_ = false, repeated_ = false;
      return;
    }
    if (kind == '#') {  // a comment
      const std::size_t close = p_.find(')', i_);
      if (close == std::string_view::npos) return fail("an unterminated comment");
      i_ = close + 1;
      return;
    }
    if (kind == 'P') return fail("backreferences have no equivalent");
    if (kind == '=' || kind == '!' || kind == '<') return fail("lookaround has no equivalent");
    if (kind == '>') return fail("atomic groups have no equivalent");
    if (kind == '(') return fail("conditional groups have no equivalent");
    // Flags: (?flags) for the whole pattern, (?flags:...) or (?flags-flags:...) for a group.
    std::size_t j = i_ + 2;
    while (j < p_.size() && std::isalpha(static_cast<unsigned char>(p_[j]))) {
      const char f = p_[j];
      if (f == 'i') return fail("the case-insensitive flag (?i) has no equivalent");
      if (f == 'x') return fail("the verbose flag (?x) has no equivalent");
      if (f != 'a' && f != 's' && f != 'm' && f != 'u') return fail(std::string("the flag ") + f + " has no equivalent");
      ++j;
    }
    if (j < p_.size() && p_[j] == '-') {  // flags turned off for a group: i, m, s, x
      ++j;
      while (j < p_.size() && std::isalpha(static_cast<unsigned char>(p_[j]))) {
        if (p_[j] != 's' && p_[j] != 'm' && p_[j] != 'i') return fail(std::string("the flag -") + p_[j] + " has no equivalent");
        ++j;
      }
    }
    if (j < p_.size() && p_[j] == ')') {  // a, s, m, u change nothing for printable-ASCII names
      i_ = j + 1;
      return;
    }
    if (j < p_.size() && p_[j] == ':') {
      i_ = j + 1, ++depth_, out_ += "(?:", can_repeat_ = false, repeated_ = false;
      return;
    }
    fail("an unknown group");
  }

  std::string_view p_;
  std::size_t i_ = 0;
  std::string out_;
  bool can_repeat_ = false, repeated_ = false;
  int depth_ = 0;
  std::string error_;
  std::size_t error_at_ = 0;
};

}  // namespace

std::optional<std::string> translate_python_regex(std::string_view python, std::string* error) {
  std::optional<std::string> pattern = Translator(python).run(error);
  if (!pattern) return std::nullopt;
  if (std::string why; !LayerPattern::compile(*pattern, &why)) {
    if (error) *error = "its translation " + *pattern + " is not a layer pattern: " + why;
    return std::nullopt;
  }
  return pattern;
}

std::string literal_pattern(std::string_view text) {
  std::string out;
  for (char c : text) out += literal(static_cast<unsigned char>(c));
  return out;
}

std::optional<std::string> layer_number_pattern(const std::vector<std::uint64_t>& numbers, std::string* error) {
  std::vector<std::uint64_t> sorted(numbers);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string values;
  for (std::uint64_t n : sorted) values += (values.empty() ? "" : "|") + std::to_string(n);
  // The number's digits: int() reads leading zeros.
  const std::string value = sorted.empty() ? "[0-9]+" : "0*(?:" + values + ")";
  // A name is stretches of non-digits and runs of digits. findall skips a run's first digit when
  // "fc" precedes it, so a lone digit after "fc" yields nothing ("silent") and a longer run yields
  // the rest; every other run yields itself. Exactly one run may yield, and it must be a value.
  const std::string silent = "[^0-9]*fc[0-9]";
  const std::string not_after_fc = "(?:[^0-9]*[^0-9c]|[^0-9]*[^0-9f]c|c)";
  const std::string pattern = "^(?:" + value + "|(?:" + silent + ")*(?:" + not_after_fc + "|[^0-9]*fc[0-9])" + value +
                              ")(?:" + silent + ")*[^0-9]*$";
  if (std::string why; !LayerPattern::compile(pattern, &why)) {
    if (error) *error = std::to_string(sorted.size()) + " layer numbers make a pattern too large (" + why + ")";
    return std::nullopt;
  }
  return pattern;
}

}  // namespace fp8scope
