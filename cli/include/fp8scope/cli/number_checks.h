// Number options checked as the user typed them: CLI11 reads "-5" into an unsigned option as
// 2^64 - 5 and lets NaN through PositiveNumber, so a typo would run a query that quietly matches
// nothing, or a timeout that never ends.
#pragma once


namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace fp8scope::cli {

// A decimal integer from 0 to 2^64 - 1.
const CLI::Validator& unsigned_number();
// A training step as the daemon stores it: a decimal integer from 0 to 2^63 - 1.
const CLI::Validator& step_number();
// Seconds: finite and above 0; longer than kLongestTimeoutSeconds reads as that (a deadline
// further out overflows gRPC's).
const CLI::Validator& positive_seconds();

// About 11 days.
inline constexpr double kLongestTimeoutSeconds = 1e6;

}  // namespace fp8scope::cli
