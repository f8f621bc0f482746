// A 16- or 8-bit tensor has at most 65,536 distinct values, so for one-scale (per-tensor)
// quantization every statistic is a function of the value: count each bit pattern once while
// reading the tensor, then evaluate the shared FP8 math once per distinct value, weighted by its
// count. The moments come out of the same counts (with an exact two-pass variance). This turns
// the per-tensor recipes on BF16, FP16 and FP8 tensors into one read with no per-recipe cost.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/stats.h"

namespace fp8scope::cpu {

// True for the element types whose bit patterns can be counted (16 bits or fewer).
bool countable(DType dtype);

// Counted, then settled once: the statistics then visit only the values present (a BF16
// activation holds a few thousand of its 65,536), and clearing for reuse touches only those.
class CodeHistogram {
 public:
  explicit CodeHistogram(DType dtype);

  // The dtypes whose tables this one can count: those of its width.
  bool fits(DType dtype) const { return bins_of(dtype) == counts_.size(); }
  void set_dtype(DType dtype) { dtype_ = dtype; }

  // Counts elements [first, first + n) of a tensor of this dtype. A histogram takes fewer than
  // 2^32 elements in all (the engine splits larger tensors over several).
  void add(const void* data, std::int64_t first, int n);
  // Adds other's counts to this one's, leaving other empty.
  void absorb(CodeHistogram& other);
  // Done counting: the statistics below may be asked for.
  void settle();
  // Empty again, as constructed.
  void clear();

  // The tensor's moments; input_scale_inv dequantizes FP8 codes.
  TensorMoments moments(float input_scale_inv) const;
  // What quantizing every element with one scale does, as the element-wise engine computes it.
  QuantStats quantize(CastFormat format, float scale, float scale_inv, float input_scale_inv) const;

 private:
  static std::size_t bins_of(DType dtype) { return std::size_t{1} << (8 * dtype_bytes(dtype)); }
  template <class F>
  void for_each_code(float input_scale_inv, F f) const;

  DType dtype_;
  std::vector<std::uint64_t> counts_;
  std::vector<std::uint32_t> pending_[2];  // fast counters, folded into counts_ by absorb and settle
  std::vector<std::uint32_t> present_;     // settled: the codes counted, ascending
  bool settled_ = false;
};

// Count tables kept for the next call: a 16-bit type's take 1 MiB each, which every call would
// otherwise allocate and fault in afresh (a fixed cost that dominated small tensors). Taken and
// given back whole by concurrent callers; at most a few kept.
class HistogramPool {
 public:
  // n empty histograms for dtype.
  std::vector<CodeHistogram> take(DType dtype, std::size_t n);
  // Histograms done with, empty (cleared).
  void give_back(std::vector<CodeHistogram> histograms);

 private:
  static constexpr std::size_t kKept = 8;
  std::mutex mu_;
  std::vector<CodeHistogram> kept_;
};

}  // namespace fp8scope::cpu
