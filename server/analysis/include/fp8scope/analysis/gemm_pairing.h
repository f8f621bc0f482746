// Pairs the X and W samples of one forward GEMM (same job, run, rank, layer and step) so the
// daemon can compare the GEMM's FP8 output with its high-precision output. Keeps the latest
// unmatched operand of a few GEMMs, bounded in count and bytes; a pair is handed out once. A
// waiting operand is the analyzed sample's own payload, moved here with its lease on the queue
// budget, so memory held for pairing is inside the daemon's stated budget, not beside it.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>

#include "fp8scope/ingest/sample.h"

namespace fp8scope::server {

struct GemmPair {
  std::shared_ptr<const ClientInfo> client;
  std::string layer;
  std::uint64_t step = 0;
  DType x_dtype, w_dtype;
  std::int64_t x_rows, x_cols, w_rows, w_cols;
  float x_scale_inv, w_scale_inv;
  Payload x, w;
  BudgetLease x_lease, w_lease;
};

class GemmPairing {
 public:
  GemmPairing(std::size_t max_pending = 16, std::uint64_t max_operand_bytes = 64ull << 20,
              std::uint64_t max_pending_bytes = 256ull << 20)
      : max_pending_(max_pending), max_operand_bytes_(max_operand_bytes), max_pending_bytes_(max_pending_bytes) {}

  // Offers an analyzed fprop operand; returns the pair when its partner was already waiting. Takes
  // the sample's payload and lease when it keeps or pairs it; leaves other samples untouched.
  std::optional<GemmPair> offer(Sample&& sample);

  std::uint64_t pending_bytes() const;

 private:
  struct Pending {
    std::string key;
    bool is_x;
    std::shared_ptr<const ClientInfo> client;
    std::string layer;
    std::uint64_t step;
    DType dtype;
    std::int64_t rows, cols;
    float scale_inv;
    Payload payload;
    BudgetLease lease;
  };
  std::size_t max_pending_;
  std::uint64_t max_operand_bytes_, max_pending_bytes_;
  std::uint64_t pending_bytes_ = 0;
  mutable std::mutex mu_;
  std::list<Pending> pending_;  // oldest first
};

}  // namespace fp8scope::server
