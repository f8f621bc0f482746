// The latest statistics of every tensor (job, run, rank, layer, gemm, operand), for
// `fp8scope tensors`: bounded, the least recently updated entry goes first when full, and a listing
// is bounded too (kMaxListed summaries; the total says how many there were).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "fp8scope/analysis/lru_map.h"

#include "fp8scope/kernels/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::server {

class TensorTable {
 public:
  static constexpr std::uint32_t kMaxListed = 1000;

  explicit TensorTable(std::size_t capacity) : entries_(capacity) {}

  void update(const v1::TensorSummary& summary);

  struct Listing {
    std::vector<v1::TensorSummary> tensors;
    std::size_t total = 0;  // the tensors that matched, before top and kMaxListed
  };
  // Worst first by `sort` (underflow, overflow, mse: highest; cosine: lowest) read from `recipe`
  // (default tensor_current, or observed for FP8 data); by key when sort is empty. top 0 = all,
  // at most kMaxListed either way.
  Result<Listing> list(const std::string& sort, std::uint32_t top, const std::string& recipe) const;

  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  LruMap<std::string, v1::TensorSummary> entries_;
};

}  // namespace fp8scope::server
