// The latest statistics of every tensor (job, run, rank, layer, expert, gemm, operand), for
// `fp8scope tensors`: bounded, the least recently updated entry goes first when full, and a listing
// is bounded too (kMaxListed summaries; the total says how many there were).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fp8scope/analysis/lru_map.h"
#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/cast_capture.h"
#include "fp8scope/vocabulary/caster.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/scale_layout.h"

namespace fp8scope::server {

// What one recipe (or the job's own cast) did to a tensor's latest sample.
struct RecipeSummary {
  Caster caster = Caster::job();
  CastFormat format = CastFormat::kE4M3;
  double scale = 0;          // per-tensor recipes: the scale applied; blocks: the smallest
  double scale_max = 0;      // blocks: the largest block scale
  double scale_current = 0;  // what current scaling would choose in this recipe's format
  ScaleLayout scale_layout = ScaleLayout::kNone;  // observed: how the job laid out its scales
  DataSource source = DataSource::kGemmOperand;   // what the figures come from
  std::vector<std::pair<const Statistic*, double>> statistics;  // those that apply, in table order

  // NaN when the statistic is not among them.
  double statistic(std::string_view key) const;
};

// A tensor's latest sample, as `fp8scope tensors` lists it (the Admin service puts it on the wire).
struct TensorSummary {
  std::string job, run;
  std::uint32_t rank = 0;
  std::string layer;
  GemmRole gemm = GemmRole::kUnknown;
  Operand operand = Operand::kX;
  std::uint64_t step = 0;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  double time = 0;  // seconds since the Unix epoch
  std::vector<RecipeSummary> recipes;
  std::optional<std::uint32_t> expert;         // a mixture-of-experts layer's: each expert is a tensor
  std::optional<std::uint64_t> expert_tokens;  // the tokens routed to it, when known
};

class TensorTable {
 public:
  static constexpr std::uint32_t kMaxListed = 1000;

  explicit TensorTable(std::size_t capacity) : entries_(capacity) {}

  void update(TensorSummary summary);

  struct Listing {
    std::vector<TensorSummary> tensors;
    std::size_t total = 0;  // the tensors that matched, before top and kMaxListed
  };
  // Worst first by `sort` (underflow, overflow, mse: highest; cosine: lowest) read from `recipe`'s
  // statistics (none: tensor_current's, and the job's own for tensors that have no what-ifs); by
  // key when sort is empty. With `recipe`, only the tensors that have it. top 0 = all, at most
  // kMaxListed either way. With `expert`, only that expert's tensors (of every MoE layer).
  Result<Listing> list(const std::string& sort, std::uint32_t top, std::optional<Caster> recipe,
                       std::optional<std::uint32_t> expert = std::nullopt) const;

  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  LruMap<std::string, TensorSummary> entries_;
};

}  // namespace fp8scope::server
