// For a command the CLI does not know: the known one it most likely meant ("analyse" ->
// "analyze", "statsu" -> "status"), if any is close enough to suggest.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fp8scope::cli {

// The candidate at the smallest edit distance (insertions, deletions, substitutions and swaps of
// neighbours), when that distance is at most a third of the word's length (at least 1).
std::optional<std::string> closest_command(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace fp8scope::cli
