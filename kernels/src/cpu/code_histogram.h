// A 16- or 8-bit tensor has at most 65,536 distinct values, so for one-scale (per-tensor)
// quantization every statistic is a function of the value: count each bit pattern once while
// reading the tensor, then evaluate the shared FP8 math once per distinct value, weighted by its
// count. The moments come out of the same counts (with an exact two-pass variance). This turns
// the per-tensor recipes on BF16, FP16 and FP8 tensors into one read with no per-recipe cost.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/stats.h"

namespace fp8scope::cpu {

// True for the element types whose bit patterns can be counted (16 bits or fewer).
bool countable(DType dtype);

class CodeHistogram {
 public:
  explicit CodeHistogram(DType dtype);

  // Counts elements [first, first + n) of a tensor of this dtype. A histogram takes fewer than
  // 2^32 elements in all (the engine splits larger tensors over several).
  void add(const void* data, std::int64_t first, int n);
  void merge(const CodeHistogram& other);

  // The tensor's moments; input_scale_inv dequantizes FP8 codes.
  TensorMoments moments(float input_scale_inv) const;
  // What quantizing every element with one scale does, as the element-wise engine computes it.
  QuantStats quantize(CastFormat format, float scale, float scale_inv, float input_scale_inv) const;

 private:
  template <class F>
  void for_each_code(float input_scale_inv, F f) const;

  DType dtype_;
  std::vector<std::uint64_t> counts_;
  std::vector<std::uint32_t> pending_[2];  // fast counters, folded into counts_ by merge()
  std::uint64_t pending_total_ = 0;
};

}  // namespace fp8scope::cpu
