// Text from files and stores (tensor names, paths, messages that quote them) on its way to a
// terminal: control characters are shown as escapes, so a name cannot move the cursor, recolor the
// screen or start a line of its own (a forged verdict).
#pragma once

#include <string>
#include <string_view>

namespace fp8scope::cli {

// `text` with every byte below 0x20 and 0x7F written as \n, \r, \t or \xNN, and backslashes doubled.
std::string printable(std::string_view text);

}  // namespace fp8scope::cli
