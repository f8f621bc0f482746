// Checks on what a client sends, before anything is allocated for it. Each refusal has a short
// stable reason (a metric label value) and a sentence for the log.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "fp8scope/ingest/sample.h"
#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/scale_layout.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::server {

inline constexpr std::size_t kMaxLabelBytes = 200;  // job, run, layer names
// History keeps steps as signed 64-bit integers (SQLite's INTEGER); a larger one would not round-trip.
inline constexpr std::uint64_t kMaxStep = std::numeric_limits<std::int64_t>::max();
inline constexpr int kMaxRank = 8;                  // tensor dimensions
inline constexpr std::uint32_t kMaxExperts = 65536;  // experts of one call
// Tokens routed to one expert: 2^40 rows is more than any device holds, and kMaxExperts of them
// sum to 2^56, so a layer's totals never wrap.
inline constexpr std::uint64_t kMaxExpertTokens = std::uint64_t{1} << 40;

struct Refusal {
  std::string reason;   // "bad_shape", "size_mismatch", ...: a metric label value
  std::string message;  // for the log and the client's Ack
};

// A label value fp8scope will put into metrics: 1..kMaxLabelBytes printable ASCII.
bool valid_label(const std::string& value);

// nullopt when the Hello is acceptable.
std::optional<Refusal> check_hello(const v1::Hello& hello);

// A sound header in the domain's words, or why it is not sound.
struct HeaderCheck {
  std::optional<SampleHeader> header;
  Refusal refusal;
};
HeaderCheck check_header(const v1::TensorHeader& header, std::uint64_t max_sample_bytes);

}  // namespace fp8scope::server
