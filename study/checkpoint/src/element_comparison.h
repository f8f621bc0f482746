// The passes over a weight's elements that `fp8scope checkpoint` makes: the export's codes alone,
// the reference's block amaxes, and the export against the reference and the producer's cast of
// it. Row by row through float buffers in loops the compiler vectorizes, rows split over the
// machine's cores; only the rows in flight are held, so memory stays at one tensor's mappings.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8scope/checkpoint/checkpoint_files.h"
#include "fp8scope/checkpoint/conventions.h"
#include "fp8scope/checkpoint/quantized_weight.h"
#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/gemm_check.h"

namespace fp8scope::checkpoint {

// A reference weight, mapped, read as fp32 rows in the export's (expert, row, col) order;
// `transposed`: stored [experts, cols, rows] (transformers keeps gpt-oss experts so).
struct Reference {
  const CheckpointTensor* tensor = nullptr;
  MappedTensor mapped;
  DType dtype = DType::kBF16;
  bool transposed = false;

  void row(const QuantizedWeight& w, std::int64_t e, std::int64_t r, float* out) const;
};

// What the codes show alone: non-finite codes, codes at ±max, and the decoded values' extremes.
struct CodeCensus {
  std::uint64_t nonfinite = 0, at_max = 0;
  double amax = 0, amin = 0;  // of the nonzero finite values; 0 when there are none
};
CodeCensus census(const WeightDecoder& dec);

// Each scale block's amax of the reference (NaN skipped, as TE's and torch's amax reductions), and
// the tensor's.
std::vector<float> block_amaxes(const WeightDecoder& dec, const Reference& ref, float* tensor_amax);

// The dequantized export against the reference; its codes against the producer's cast of the
// reference with the stored scales (`differing`, `off_by_more`: more than one grid step) and with
// the producer's own scales (`differing_from_expected`, one per grid cell).
struct ElementComparison {
  GemmErrorSums sums;
  std::uint64_t differing = 0, off_by_more = 0, differing_from_expected = 0;
};
ElementComparison compare_elements(const WeightDecoder& dec, Convention c, const Reference& ref,
                                   const std::vector<float>& expected_scales);

// The cosine of the export's first rows against a reference tensor (is it that one's?).
double sampled_cosine(const WeightDecoder& dec, const Reference& ref);

double relative_error(const GemmErrorSums& s);
double cosine_of(const GemmErrorSums& s);
// The relative error had the same codes been read as E4M3 FNUZ: every finite FNUZ value is half
// the OCP one at the same bits, so it follows from the OCP sums (sum (x - v/2)^2).
double relative_error_as_fnuz(const GemmErrorSums& s);

}  // namespace fp8scope::checkpoint
