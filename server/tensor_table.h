// The latest statistics of every tensor (job, run, rank, layer, gemm, operand), for
// `fp8scope tensors`: bounded, the least recently updated entry goes first when full.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "fp8scope/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::server {

class TensorTable {
 public:
  explicit TensorTable(std::size_t capacity) : capacity_(capacity) {}

  void update(const v1::TensorSummary& summary);

  // Worst first by `sort` (underflow, overflow, mse: highest; cosine: lowest) read from `recipe`
  // (default tensor_current, or observed for FP8 data); by key when sort is empty. top 0 = all.
  Result<std::vector<v1::TensorSummary>> list(const std::string& sort, std::uint32_t top, const std::string& recipe) const;

  std::size_t size() const;

 private:
  using Key = std::tuple<std::string, std::string, std::uint32_t, std::string, int, int>;
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::map<Key, v1::TensorSummary> entries_;
};

}  // namespace fp8scope::server
