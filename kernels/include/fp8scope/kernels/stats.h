// The accumulators of one analysis and how partial results merge (chunks, threads, GPU blocks,
// ranks). Counts are exact integers, sums are fp64, the central moments merge with Chan et al.'s
// and Pébay's pairwise formulas, so merging chunks equals a single pass up to fp64 rounding. What is derived from these
// (ratios, MSE, cosine, ...) lives in statistics_table.h.
#pragma once

#include <cstdint>

#include "fp8scope/kernels/host_device.h"

namespace fp8scope {

// log2|x*s| histogram: bin i counts floor(log2|x*s|) == kHistogramMinLog2 + i over finite nonzero
// elements; the first and last bins also hold everything below and above. -40..23 spans both FP8
// windows (E5M2's smallest subnormal is 2^-16, E4M3's max 2^8.8) with room on both sides.
inline constexpr int kHistogramBins = 64;
inline constexpr int kHistogramMinLog2 = -40;

// Block scales' histogram: bin i counts blocks with floor(log2 scale_inv) == kScaleHistogramMinLog2
// + i, the ends holding everything beyond. -64..15 spans the decode scales of activations, weights
// and gradients, and NVFP4's UE4M3 block scales without their per-tensor factor (up to 448); the
// E8M0 extremes (2^-127, 2^127) are counted apart, as the floor and ceiling.
inline constexpr int kScaleHistogramBins = 80;
inline constexpr int kScaleHistogramMinLog2 = -64;

// Recipe-independent facts about the tensor. amax/amin/moments are over finite elements only;
// NaN and Inf are counted, never folded in.
struct TensorMoments {
  std::uint64_t numel = 0;
  std::uint64_t finite = 0;
  std::uint64_t nonzero = 0;  // finite and != 0
  std::uint64_t nan = 0;
  std::uint64_t inf = 0;
  float amax = 0.0f;                       // max |x|
  float amin = 0x1.fffffep127f;            // min nonzero |x|; FLT_MAX while nothing nonzero seen
  float min = __builtin_inff();            // smallest x, signed; +Inf while nothing finite seen
  float max = -__builtin_inff();           // largest x, signed; -Inf while nothing finite seen
  double sum = 0.0;                        // Σx
  double sum_abs = 0.0;                    // Σ|x|: the L1 norm
  double sum_squares = 0.0;                // Σx²
  double m2 = 0.0;                         // Σ(x - mean)², merged with Chan's formula
  double m3 = 0.0;                         // Σ(x - mean)³, merged with Pébay's (2008, eq. 2.2)...
  double m4 = 0.0;                         // Σ(x - mean)⁴, ...and his eq. 2.3: kurtosis without a second pass
};

// What one recipe's quantization did to the tensor. x̂ = fp32(Q(fp32(x*s))) * fp32(1/s). Under
// stochastic rounding every count and sum is its expectation over the rounding (a count is then a
// fraction); otherwise counts are whole numbers, exact in fp64 below 2^53 elements.
struct QuantStats {
  double underflow = 0;          // finite nonzero x with Q == 0 (nnz(x) - nnz(Q))
  double overflow = 0;           // finite x whose cast lies beyond ±max (clipped): nearest-even
                                 // beyond it, or stochastic rounding of a |x*s| above it
  double saturated = 0;          // finite x with Q == ±max
  double squared_error = 0.0;    // Σ(x - x̂)²
  double dot = 0.0;              // Σx·x̂
  double dequant_squares = 0.0;  // Σx̂²
  float scale_min = 0x1.fffffep127f;  // smallest scale applied (per-tensor recipes: the one scale)
  float scale_max = 0.0f;             // largest scale applied
  std::uint64_t histogram[kHistogramBins] = {};
  // The job's own block scales (recipe "observed"; zero for the what-ifs): over the blocks holding
  // a nonzero value, how many have the scale encoding's smallest value (or zero: E8M0 2^-127,
  // UE4M3 0 or 2^-9, fp32 below 2^-126) or its largest (E8M0 2^127, UE4M3 448, fp32 Inf), the
  // largest log2(max/min nonzero |x|) within one block (TE's max_blockwise_dynamic_range), and
  // the histogram of their decode scales.
  std::uint64_t scale_blocks = 0;
  std::uint64_t scale_blocks_at_floor = 0;
  std::uint64_t scale_blocks_at_ceiling = 0;
  float max_block_dynamic_range_log2 = 0.0f;
  std::uint64_t scale_histogram[kScaleHistogramBins] = {};
  // The job's own cast checked against fp8scope's model of its recipe (cast_check.h): elements
  // whose code or block scale the model writes differently, of those compared.
  std::uint64_t code_mismatches = 0;
  std::uint64_t codes_compared = 0;
};

FP8SCOPE_HD float min_f(float a, float b) { return b < a ? b : a; }
FP8SCOPE_HD float max_f(float a, float b) { return b > a ? b : a; }

// A second pass's step: `weight` elements at distance d from the mean, into m2, m3 and m4.
FP8SCOPE_HD void add_deviation(TensorMoments& m, double d, double weight = 1.0) {
  const double d2 = d * d;
  m.m2 += weight * d2;
  m.m3 += weight * (d2 * d);
  m.m4 += weight * (d2 * d2);
}

FP8SCOPE_HD void merge(TensorMoments& into, const TensorMoments& other) {
  if (other.finite > 0 && into.finite > 0) {
    const double na = static_cast<double>(into.finite);
    const double nb = static_cast<double>(other.finite);
    const double n = na + nb;
    const double delta = other.sum / nb - into.sum / na;
    const double d2 = delta * delta;
    // Each higher moment's correction reads the lower ones before they are updated.
    into.m4 = into.m4 + other.m4 + d2 * d2 * (na * nb * (na * na - na * nb + nb * nb) / (n * n * n)) +
              6.0 * d2 * (na * na * other.m2 + nb * nb * into.m2) / (n * n) +
              4.0 * delta * (na * other.m3 - nb * into.m3) / n;
    into.m3 = into.m3 + other.m3 + d2 * delta * (na * nb * (na - nb) / (n * n)) +
              3.0 * delta * (na * other.m2 - nb * into.m2) / n;
    into.m2 = into.m2 + other.m2 + d2 * (na * nb / n);
  } else if (other.finite > 0) {
    into.m2 = other.m2;
    into.m3 = other.m3;
    into.m4 = other.m4;
  }
  into.numel += other.numel;
  into.finite += other.finite;
  into.nonzero += other.nonzero;
  into.nan += other.nan;
  into.inf += other.inf;
  into.amax = max_f(into.amax, other.amax);
  into.amin = min_f(into.amin, other.amin);
  into.min = min_f(into.min, other.min);
  into.max = max_f(into.max, other.max);
  into.sum += other.sum;
  into.sum_abs += other.sum_abs;
  into.sum_squares += other.sum_squares;
}

// The counts and fp64 error sums of one recipe, added field by field: QuantStats and the CUDA
// kernel's per-thread accumulators (the same fields, no histogram) merge through this one place.
template <class Into, class From>
FP8SCOPE_HD void add_error_sums(Into& into, const From& other) {
  into.underflow += other.underflow;
  into.overflow += other.overflow;
  into.saturated += other.saturated;
  into.squared_error += other.squared_error;
  into.dot += other.dot;
  into.dequant_squares += other.dequant_squares;
}

FP8SCOPE_HD void merge(QuantStats& into, const QuantStats& other) {
  add_error_sums(into, other);
  into.scale_min = min_f(into.scale_min, other.scale_min);
  into.scale_max = max_f(into.scale_max, other.scale_max);
  for (int i = 0; i < kHistogramBins; ++i) into.histogram[i] += other.histogram[i];
  into.scale_blocks += other.scale_blocks;
  into.scale_blocks_at_floor += other.scale_blocks_at_floor;
  into.scale_blocks_at_ceiling += other.scale_blocks_at_ceiling;
  into.max_block_dynamic_range_log2 = max_f(into.max_block_dynamic_range_log2, other.max_block_dynamic_range_log2);
  for (int i = 0; i < kScaleHistogramBins; ++i) into.scale_histogram[i] += other.scale_histogram[i];
  into.code_mismatches += other.code_mismatches;
  into.codes_compared += other.codes_compared;
}

}  // namespace fp8scope
