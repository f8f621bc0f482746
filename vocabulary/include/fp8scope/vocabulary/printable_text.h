// Text from files, clients and stores (tensor and layer names, paths, messages that quote them) on
// its way to a terminal, a log line or a table: control characters are shown as escapes, so a name
// cannot move the cursor, recolor the screen or start a line of its own (a forged verdict or log
// line).
#pragma once

#include <string>
#include <string_view>

namespace fp8scope {

// `text` with every byte below 0x20 and 0x7F written as \n, \r, \t or \xNN, and backslashes doubled.
inline std::string printable(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace fp8scope
