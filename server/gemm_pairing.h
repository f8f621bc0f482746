// Pairs the X and W samples of one forward GEMM (same job, run, rank, layer and step) so the
// daemon can compare the GEMM's FP8 output with its high-precision output. Keeps the latest
// unmatched operand of a few GEMMs (copies, bounded in count and size); a pair is handed out once.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>

#include "sample.h"

namespace fp8scope::server {

struct GemmPair {
  std::shared_ptr<const ClientInfo> client;
  std::string layer;
  std::uint64_t step = 0;
  DType x_dtype, w_dtype;
  std::int64_t x_rows, x_cols, w_rows, w_cols;
  float x_scale_inv, w_scale_inv;
  Payload x, w;
};

class GemmPairing {
 public:
  GemmPairing(std::size_t max_pending = 16, std::uint64_t max_operand_bytes = 64ull << 20)
      : max_pending_(max_pending), max_operand_bytes_(max_operand_bytes) {}

  // Offers an fprop operand; returns the pair when its partner was already waiting.
  std::optional<GemmPair> offer(const Sample& sample);

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
  };
  std::size_t max_pending_;
  std::uint64_t max_operand_bytes_;
  std::mutex mu_;
  std::list<Pending> pending_;  // oldest first
};

}  // namespace fp8scope::server
