// Python `re` patterns (nvdlfw_inspect's layer selectors) as layer patterns (layer_pattern.h). A
// pattern translates only when the layer pattern selects exactly the printable-ASCII names the
// Python one does under re.search; anything else is refused with the offset and the reason, never
// widened or narrowed. Layer names are printable ASCII (the hook labels nothing else), which is
// why \d, \w, \s, `.`, `$` and the flags (?a), (?s), (?m) mean here what they mean in Python.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8scope {

// The layer pattern, or nothing with `error` saying what Python construct at which offset has no
// exact equivalent (lookaround, backreferences, \b, case-insensitive or verbose flags, atomic
// groups, possessive quantifiers, Unicode escapes).
std::optional<std::string> translate_python_regex(std::string_view python, std::string* error);

// A pattern that searches for `text` literally (re.escape).
std::string literal_pattern(std::string_view text);

// nvdlfw_inspect's layer_numbers: the name holds exactly one number, as
// re.findall(r"(?<!fc)\d+", name) finds them, and its value is one of `numbers` (0 or more
// digits). config_manager.py raises for a name with no number or several; such names are not
// selected here. Nothing (with `error`) when the pattern would be too large.
std::optional<std::string> layer_number_pattern(const std::vector<std::uint64_t>& numbers, std::string* error);

}  // namespace fp8scope
