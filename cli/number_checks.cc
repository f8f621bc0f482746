#include "fp8scope/cli/number_checks.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace fp8scope::cli {
namespace {

// "" when `text` is a decimal integer from 0 to `largest`, else what is wrong.
std::string unsigned_error(const std::string& text, unsigned long long largest, const char* what) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || v > largest) {
    return "expected " + std::string(what) + " from 0 to " + std::to_string(largest) + ", got " + text;
  }
  return "";
}

}  // namespace

const CLI::Validator& unsigned_number() {
  static const CLI::Validator v(
      [](std::string& text) { return unsigned_error(text, std::numeric_limits<unsigned long long>::max(), "an integer"); },
      "UINT");
  return v;
}

const CLI::Validator& step_number() {
  static const CLI::Validator v(
      [](std::string& text) {
        return unsigned_error(text, static_cast<unsigned long long>(std::numeric_limits<long long>::max()), "a step");
      },
      "STEP");
  return v;
}

const CLI::Validator& positive_seconds() {
  static const CLI::Validator v(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double seconds = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
          return "expected a number of seconds above 0, got " + text;
        }
        if (seconds > kLongestTimeoutSeconds) text = std::to_string(kLongestTimeoutSeconds);
        return "";
      },
      "SECONDS");
  return v;
}

}  // namespace fp8scope::cli
