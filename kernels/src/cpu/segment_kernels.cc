// Compiled once per ISA level; FP8SCOPE_ISA names the copy and FP8SCOPE_VECTOR_BYTES its vector
// width (see kernels/CMakeLists.txt). The loops run the shared FP8 math (quantize_element.h) on
// whole vectors; each ends with a scalar tail that runs the same math on single floats.
#include "segment_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "fp8scope/kernels/quantize_element.h"
#include "fp8scope/kernels/scale_rules.h"
#include "vector_sums.h"

namespace fp8scope::cpu::FP8SCOPE_ISA {
namespace {

constexpr std::uint32_t kNoBin = kHistogramBins;  // zero and non-finite elements are not binned
constexpr std::uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr std::uint32_t kInfBits = 0x7F800000u;
constexpr std::uint32_t kFloatMaxBits = 0x7F7FFFFFu;

template <class T, class Convert>
void convert_loop(const void* data, std::int64_t first, int n, float* out, Convert convert) {
  const T* src = static_cast<const T*>(data) + first;
  for (int i = 0; i < n; ++i) out[i] = convert(src[i]);
}

// Every code's value, so a conversion is a table look-up.
struct CodeTable {
  float value[256];
};

template <const FloatFormat& F>
const CodeTable& code_table() {
  static const CodeTable table = [] {
    CodeTable t;
    for (int c = 0; c < 256; ++c) t.value[c] = decode<F>(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table;
}

void to_float(const void* data, DType dtype, float scale_inv, std::int64_t first, int n, float* out) {
  switch (dtype) {
    case DType::kF32: std::memcpy(out, static_cast<const float*>(data) + first, sizeof(float) * n); return;
    case DType::kBF16: convert_loop<std::uint16_t>(data, first, n, out, [](std::uint16_t h) { return bf16_to_float(h); }); return;
    case DType::kF16: convert_loop<std::uint16_t>(data, first, n, out, [](std::uint16_t h) { return half_to_float(h); }); return;
    case DType::kF64: convert_loop<double>(data, first, n, out, [](double v) { return static_cast<float>(v); }); return;
    case DType::kE4M3:
    case DType::kE5M2: {
      const float* table = (dtype == DType::kE4M3 ? code_table<kE4M3>() : code_table<kE5M2>()).value;
      convert_loop<std::uint8_t>(data, first, n, out,
                                 [table, scale_inv](std::uint8_t c) { return mul_rn(table[c], scale_inv); });
      return;
    }
    case DType::kE2M1: {
      const float* table = code_table<kE2M1>().value;
      for (int i = 0; i < n; ++i) {
        out[i] = mul_rn(table[fp4_code(data, static_cast<std::size_t>(first + i))], scale_inv);
      }
      return;
    }
  }
}

// ---- Moments ------------------------------------------------------------------------------------

struct MomentLanes {
  I32V nan{}, inf{}, zero{};  // negative counts
  U32V amax{};                // |x| bits: for non-negative floats integer order is float order
  U32V amin = splat<U32V>(kFloatMaxBits);
  F32V min = splat<F32V>(__builtin_inff()), max = splat<F32V>(-__builtin_inff());  // signed, finite elements
  F64V sum[2] = {}, abs_sum[2] = {}, squares[2] = {}, cubes[2] = {}, fourths[2] = {};
};

inline void add_moment_lanes(MomentLanes& m, F32V x) {
  const U32V bits = Lanes<F32V>::to_bits(x) & kAbsMask;
  const I32V finite = bits < kInfBits;
  const I32V zero = bits == 0u;
  m.nan += bits > kInfBits;
  m.inf += bits == kInfBits;
  m.zero += zero;
  const U32V finite_bits = finite ? bits : U32V{};
  m.amax = finite_bits > m.amax ? finite_bits : m.amax;
  const U32V nonzero_bits = (finite & ~zero) ? bits : splat<U32V>(kFloatMaxBits);
  m.amin = nonzero_bits < m.amin ? nonzero_bits : m.amin;
  const F32V v = finite ? x : F32V{};
  m.min = (finite & (x < m.min)) ? x : m.min;
  m.max = (finite & (x > m.max)) ? x : m.max;
  const F32V magnitude = Lanes<F32V>::from_bits(Lanes<F32V>::to_bits(v) & kAbsMask);
  m.abs_sum[0] += widen_low(magnitude);
  m.abs_sum[1] += widen_high(magnitude);
  const F64V lo = widen_low(v), hi = widen_high(v);
  const F64V lo2 = lo * lo, hi2 = hi * hi;
  m.sum[0] += lo;
  m.sum[1] += hi;
  m.squares[0] += lo2;
  m.squares[1] += hi2;
  m.cubes[0] += lo2 * lo;
  m.cubes[1] += hi2 * hi;
  m.fourths[0] += lo2 * lo2;
  m.fourths[1] += hi2 * hi2;
}

// m2, m3 and m4 of a segment around its mean, NaN and Inf left out.
void add_deviations(const float* __restrict x, int n, double mean, TensorMoments& m) {
  F64V acc2[2] = {}, acc3[2] = {}, acc4[2] = {};
  int k = 0;
  for (; k + kWidth <= n; k += kWidth) {
    const F32V v = load<F32V>(x + k);
    F64V d[2] = {widen_low(v) - mean, widen_high(v) - mean};
    for (int h = 0; h < 2; ++h) {
      // d - d is 0 exactly for a finite d and NaN for NaN or Inf: those lanes add nothing.
      d[h] = (d[h] - d[h]) == 0.0 ? d[h] : F64V{};
      const F64V d2 = d[h] * d[h];
      acc2[h] += d2;
      acc3[h] += d2 * d[h];
      acc4[h] += d2 * d2;
    }
  }
  m.m2 = add_lanes(acc2[0]) + add_lanes(acc2[1]);
  m.m3 = add_lanes(acc3[0]) + add_lanes(acc3[1]);
  m.m4 = add_lanes(acc4[0]) + add_lanes(acc4[1]);
  for (; k < n; ++k) {
    if ((float_bits(x[k]) & kAbsMask) < kInfBits) add_deviation(m, x[k] - mean);
  }
}

void add_moments(const float* __restrict x, int n, TensorMoments* into) {
  MomentLanes lanes;
  int i = 0;
  for (; i + kWidth <= n; i += kWidth) add_moment_lanes(lanes, load<F32V>(x + i));
  TensorMoments m;
  m.numel = static_cast<std::uint64_t>(n);
  m.nan = count_lanes(lanes.nan);
  m.inf = count_lanes(lanes.inf);
  std::uint64_t zero = count_lanes(lanes.zero);
  std::uint32_t amax_bits = 0, amin_bits = kFloatMaxBits;
  for (int k = 0; k < kWidth; ++k) {
    amax_bits = lanes.amax[k] > amax_bits ? lanes.amax[k] : amax_bits;
    amin_bits = lanes.amin[k] < amin_bits ? lanes.amin[k] : amin_bits;
    m.min = lanes.min[k] < m.min ? lanes.min[k] : m.min;
    m.max = lanes.max[k] > m.max ? lanes.max[k] : m.max;
  }
  double sum = add_lanes(lanes.sum[0]) + add_lanes(lanes.sum[1]);
  double abs_sum = add_lanes(lanes.abs_sum[0]) + add_lanes(lanes.abs_sum[1]);
  double squares = add_lanes(lanes.squares[0]) + add_lanes(lanes.squares[1]);
  double cubes = add_lanes(lanes.cubes[0]) + add_lanes(lanes.cubes[1]);
  double fourths = add_lanes(lanes.fourths[0]) + add_lanes(lanes.fourths[1]);
  for (; i < n; ++i) {
    const std::uint32_t bits = float_bits(x[i]) & kAbsMask;
    m.nan += bits > kInfBits;
    m.inf += bits == kInfBits;
    if (bits >= kInfBits) continue;
    zero += bits == 0;
    amax_bits = bits > amax_bits ? bits : amax_bits;
    if (bits != 0) amin_bits = bits < amin_bits ? bits : amin_bits;
    m.min = x[i] < m.min ? x[i] : m.min;
    m.max = x[i] > m.max ? x[i] : m.max;
    const double v = x[i], v2 = v * v;
    sum += v;
    abs_sum += std::fabs(v);
    squares += v2;
    cubes += v2 * v;
    fourths += v2 * v2;
  }
  m.finite = m.numel - m.nan - m.inf;
  m.nonzero = m.finite - zero;
  m.amax = bits_float(amax_bits);
  m.amin = bits_float(amin_bits);
  m.sum = sum;
  m.sum_abs = abs_sum;
  m.sum_squares = squares;
  if (m.finite > 0) {
    // The central moments from the power sums lose at most six bits while (Σx)²/n <= Σx²/2 (the
    // mean no larger than the spread: every term is then within 64x of Σ(x - mean)⁴); past that
    // the segment takes a second pass around its own mean.
    const double n_finite = static_cast<double>(m.finite);
    const double shift = sum * sum / n_finite;
    const double mean = sum / n_finite;
    if (shift <= 0.5 * squares) {
      m.m2 = squares - shift;
      m.m3 = cubes - 3.0 * mean * squares + 2.0 * n_finite * mean * mean * mean;
      m.m4 = fourths - 4.0 * mean * cubes + 6.0 * mean * mean * squares - 3.0 * n_finite * (mean * mean) * (mean * mean);
    } else {
      add_deviations(x, n, mean, m);
    }
  }
  merge(*into, m);
}

void block_amax(const float* x, int n, int block, float* out) {
  for (int b = 0, first = 0; first < n; ++b, first += block) {
    const int end = first + block < n ? first + block : n;
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (int i = first; i < end; ++i) {
      const float a = std::fabs(x[i]);
      m = a > m ? a : m;  // a NaN compares false and is skipped; Inf wins, as in TE
    }
    out[b] = m;
  }
}

void fold_amax(const float* __restrict x, int n, float* __restrict acc) {
#pragma omp simd
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    acc[i] = a > acc[i] ? a : acc[i];  // as block_amax: NaN skipped, Inf kept
  }
}

std::uint16_t max_magnitude_bits16(const std::uint16_t* __restrict codes, int n, std::uint16_t inf_bits) {
  std::uint16_t m = 0;
#pragma omp simd reduction(max : m)
  for (int i = 0; i < n; ++i) {
    const std::uint16_t k = codes[i] & 0x7FFFu;
    m = std::max<std::uint16_t>(m, k > inf_bits ? 0 : k);  // NaN skipped
  }
  return m;
}

void fold_magnitude_bits16(const std::uint16_t* __restrict codes, int n, std::uint16_t inf_bits,
                           std::uint16_t* __restrict acc) {
  // Branch-free (a mask clears NaN's bits), so it vectorizes.
#pragma omp simd
  for (int i = 0; i < n; ++i) {
    const std::uint16_t k = codes[i] & 0x7FFFu;
    const std::uint16_t v = k & static_cast<std::uint16_t>(-static_cast<int>(k <= inf_bits));
    const std::uint16_t a = acc[i];
    acc[i] = a > v ? a : v;
  }
}

// ---- Histogram ----------------------------------------------------------------------------------

// Counts bins[0..n) into hist. A segment's values cluster in a few binades, so each bin in the
// segment's range is counted with byte-wide vector compares, eight bins per read of the segment;
// a spread wider than kMaxVectorBins falls back to scalar increments.
constexpr int kMaxVectorBins = 32;
constexpr int kBinsPerRead = 8;

void add_histogram(const std::uint8_t* __restrict bins, int n, std::uint64_t* __restrict hist) {
  std::uint8_t lo = kNoBin, hi = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (int i = 0; i < n; ++i) {
    const std::uint8_t b = bins[i];
    lo = b < lo ? b : lo;
    hi = (b != kNoBin && b > hi) ? b : hi;
  }
  if (lo == kNoBin) return;
  constexpr int kStep = static_cast<int>(sizeof(U8V));
  const int full = n / kStep * kStep;
  if (hi - lo < kMaxVectorBins) {
    constexpr int kChunk = 255 * kStep;  // a byte counter takes at most 255 hits
    for (int b = lo; b <= hi; b += kBinsPerRead) {
      for (int first = 0; first < full; first += kChunk) {
        const int end = first + kChunk < full ? first + kChunk : full;
        U8V count[kBinsPerRead] = {};
        for (int i = first; i < end; i += kStep) {
          const U8V v = load<U8V>(bins + i);
          for (int k = 0; k < kBinsPerRead; ++k) {
            count[k] = (v == static_cast<std::uint8_t>(b + k)) ? count[k] + 1 : count[k];
          }
        }
        for (int k = 0; k < kBinsPerRead && b + k <= hi; ++k) hist[b + k] += add_lanes(count[k]);
      }
    }
  } else {
    std::uint32_t local[kHistogramBins + 1] = {};
    for (int i = 0; i < full; ++i) ++local[bins[i]];
    for (int b = 0; b < kHistogramBins; ++b) hist[b] += local[b];
  }
  for (int i = full; i < n; ++i) {
    if (bins[i] != kNoBin) ++hist[bins[i]];
  }
}

// ---- Quantization -------------------------------------------------------------------------------

struct QuantLanes {
  I32V underflow{}, overflow{}, saturated{};  // negative counts
  F64V squared_error[2] = {}, dot[2] = {}, dequant_squares[2] = {};
};

// kMaybeNonFinite: the segment may hold NaN or Inf, which every count and sum must skip; a segment
// of finite values (the usual case) takes the path without those masks.
template <const FloatFormat& F, bool kMaybeNonFinite>
inline void quantize_lanes(QuantLanes& acc, F32V x, F32V scale, F32V scale_inv, std::uint8_t* bins) {
  const QuantizedElement<F32V> e = quantize_element<F>(x, scale, scale_inv);
  F32V xv = x, qv = e.dequantized;
  I32V binned = x != 0.0f;
  if constexpr (kMaybeNonFinite) {
    const I32V finite = (Lanes<F32V>::to_bits(x) & kAbsMask) < kInfBits;
    acc.underflow += finite & e.underflow;
    acc.overflow += finite & e.overflow;
    acc.saturated += finite & e.saturated;
    xv = finite ? x : F32V{};
    qv = finite ? qv : F32V{};
    binned &= finite;
  } else {
    acc.underflow += e.underflow;
    acc.overflow += e.overflow;
    acc.saturated += e.saturated;
  }
  const F64V x_lo = widen_low(xv), x_hi = widen_high(xv), q_lo = widen_low(qv), q_hi = widen_high(qv);
  const F64V d_lo = x_lo - q_lo, d_hi = x_hi - q_hi;
  acc.squared_error[0] += d_lo * d_lo;
  acc.squared_error[1] += d_hi * d_hi;
  acc.dot[0] += x_lo * q_lo;
  acc.dot[1] += x_hi * q_hi;
  acc.dequant_squares[0] += q_lo * q_lo;
  acc.dequant_squares[1] += q_hi * q_hi;
  const U32V bin = binned ? log2_bin(e.abs_scaled) : splat<U32V>(kNoBin);
  store(bins, __builtin_convertvector(bin, U8W));
}

bool all_finite(const float* __restrict x, int n) {
  std::uint32_t special = 0;  // an all-ones exponent anywhere means NaN or Inf
#pragma omp simd reduction(| : special)
  for (int i = 0; i < n; ++i) special |= ((float_bits(x[i]) & kInfBits) == kInfBits) ? 1u : 0u;
  return special == 0;
}

// One loop per rule, so each vectorizes; the per-block arithmetic is scale_rules.h's.
void block_scales(const BlockRule& rule, const float* __restrict amax, int nb, float* __restrict scale,
                  float* __restrict scale_inv) {
  auto each = [&](auto rule_of_block) {
    for (int b = 0; b < nb; ++b) {
      const ScalePair p = rule_of_block(rule, amax[b]);
      scale[b] = p.scale;
      scale_inv[b] = p.scale_inv;
    }
  };
  switch (rule.kind) {
    // Lambdas, not function pointers: each loop gets its rule inlined.
    case BlockRule::kE8M0: each([](const BlockRule& r, float a) { return mx_block_scale(r, a); }); return;
    case BlockRule::kNvfp4: each([](const BlockRule& r, float a) { return nvfp4_block_scale(r, a); }); return;
    // Its map-to-6 candidate: the pick, which needs the elements, follows (four_over_six_scales).
    case BlockRule::kNvfp4FourOverSix: each([](const BlockRule& r, float a) { return block_scale(r, a); }); return;
    case BlockRule::kCurrent: each([](const BlockRule& r, float a) { return current_block_scale(r, a); }); return;
  }
}

// Runs one(acc, at, masked) over a segment's whole vectors, two in flight, masked (std::true_type)
// when the segment holds NaN or Inf; returns where the scalar tail starts.
template <class Acc, class One>
int over_vectors(const float* x, int n, Acc (&acc)[2], One one) {
  int i = 0;
  auto run = [&](auto masked) {
    for (; i + 2 * kWidth <= n; i += 2 * kWidth) {
      one(acc[0], i, masked);
      one(acc[1], i + kWidth, masked);
    }
    for (; i + kWidth <= n; i += kWidth) one(acc[0], i, masked);
  };
  if (all_finite(x, n)) {
    run(std::false_type{});
  } else {
    run(std::true_type{});
  }
  return i;
}

// A cast's scalar tail: x[i..n) one float at a time through add(q, x_i, i), which adds a finite
// element's outcome and returns its |x*s|, the same math as the vectors'; then the segment's
// histogram, and q into *into, whose scale range stays.
template <class Add>
void finish_cast(const float* x, int i, int n, std::uint8_t* bins, QuantStats& q, QuantStats* into, Add add) {
  for (; i < n; ++i) {
    const float xi = x[i];
    bins[i] = kNoBin;
    if (!(std::fabs(xi) < __builtin_inff())) continue;
    const float abs_scaled = add(q, xi, i);
    if (xi != 0.0f) bins[i] = static_cast<std::uint8_t>(log2_bin(abs_scaled));
  }
  add_histogram(bins, n, q.histogram);
  q.scale_min = into->scale_min;
  q.scale_max = into->scale_max;
  merge(*into, q);
}

double sum_of(const F64V (&halves)[2]) { return add_lanes(halves[0]) + add_lanes(halves[1]); }

// The error sums every lane structure keeps in two halves of fp64 lanes.
template <class Lanes>
void add_error_lanes(QuantStats& q, const Lanes& a) {
  q.squared_error += sum_of(a.squared_error);
  q.dot += sum_of(a.dot);
  q.dequant_squares += sum_of(a.dequant_squares);
}

template <const FloatFormat& F, bool kPerBlock>
void quantize_loop(const float* __restrict x, int n, const float* __restrict scale,
                   const float* __restrict scale_inv, int block_cols, QuantStats* into) {
  alignas(64) std::uint8_t bins[kSegmentCols];
  QuantLanes acc[2];
  const F32V s0 = splat<F32V>(scale[0]), si0 = splat<F32V>(scale_inv[0]);
  int i = over_vectors(x, n, acc, [&](QuantLanes& a, int at, auto masked) {
    quantize_lanes<F, decltype(masked)::value>(a, load<F32V>(x + at), kPerBlock ? splat<F32V>(scale[at / block_cols]) : s0,
                                               kPerBlock ? splat<F32V>(scale_inv[at / block_cols]) : si0, bins + at);
  });
  QuantStats q;
  for (const QuantLanes& a : acc) {
    q.underflow += count_lanes(a.underflow);
    q.overflow += count_lanes(a.overflow);
    q.saturated += count_lanes(a.saturated);
    add_error_lanes(q, a);
  }
  finish_cast(x, i, n, bins, q, into, [&](QuantStats& s, float xi, int at) {
    const int b = kPerBlock ? at / block_cols : 0;
    const QuantizedElement<float> e = quantize_element<F>(xi, scale[b], scale_inv[b]);
    add_element(s, xi, e);
    return e.abs_scaled;
  });
}

template <const FloatFormat& F>
void quantize_as(const float* x, int n, const float* scale, const float* scale_inv, int block_cols, QuantStats* into) {
  block_cols > 0 ? quantize_loop<F, true>(x, n, scale, scale_inv, block_cols, into)
                 : quantize_loop<F, false>(x, n, scale, scale_inv, block_cols, into);
}

// Stochastic rounding's expectation: fp64 weights in every lane; as quantize_lanes, a segment of
// finite values skips the masks NaN and Inf need.
struct ExpectedLanes {
  F64V underflow[2] = {}, overflow[2] = {}, saturated[2] = {};
  F64V squared_error[2] = {}, dot[2] = {}, dequant_squares[2] = {};
};

// add_expected_element's sums, on half a vector widened to fp64.
inline void add_expected_half(ExpectedLanes& acc, int h, F64V x, F64V lo, F64V hi, F64V p, F64V flushes, F64V at_max,
                              F64V clipped) {
  const F64V pd = p * (hi - lo), sum = lo + hi, dl = x - lo;
  acc.underflow[h] += flushes - flushes * p;
  acc.overflow[h] += clipped;
  acc.saturated[h] += at_max;
  acc.squared_error[h] += dl * dl - pd * (x + x - sum);
  acc.dot[h] += x * (lo + pd);
  acc.dequant_squares[h] += lo * lo + pd * sum;
}

template <const FloatFormat& F, bool kMaybeNonFinite>
inline void expected_lanes(ExpectedLanes& acc, F32V x, F32V scale, F32V scale_inv, std::uint8_t* bins) {
  const ExpectedElement<F32V> e = stochastic_element<F>(x, scale, scale_inv);
  const F32V one = splat<F32V>(1.0f), zero{};
  I32V finite = ~I32V{};  // all lanes set
  F32V xv = x, lo = e.low, hi = e.high, p = e.p_high, at_max = e.p_saturated, clipped = e.p_overflow;
  if constexpr (kMaybeNonFinite) {
    finite = (Lanes<F32V>::to_bits(x) & kAbsMask) < kInfBits;
    xv = finite ? x : zero;
    lo = finite ? lo : zero;
    hi = finite ? hi : zero;
    p = finite ? p : zero;
    at_max = finite ? at_max : zero;
    clipped = finite ? clipped : zero;
  }
  const F32V flushes = (finite & e.low_zero & (x != 0.0f)) ? one : zero;
  add_expected_half(acc, 0, widen_low(xv), widen_low(lo), widen_low(hi), widen_low(p), widen_low(flushes),
                    widen_low(at_max), widen_low(clipped));
  add_expected_half(acc, 1, widen_high(xv), widen_high(lo), widen_high(hi), widen_high(p), widen_high(flushes),
                    widen_high(at_max), widen_high(clipped));
  const U32V bin = (finite & (x != 0.0f)) ? log2_bin(e.abs_scaled) : splat<U32V>(kNoBin);
  store(bins, __builtin_convertvector(bin, U8W));
}

template <const FloatFormat& F>
void quantize_expected_as(const float* __restrict x, int n, const float* __restrict scale,
                          const float* __restrict scale_inv, int block_cols, QuantStats* into) {
  alignas(64) std::uint8_t bins[kSegmentCols];
  ExpectedLanes acc[2];
  auto block_of = [&](int at) { return block_cols > 0 ? at / block_cols : 0; };
  int i = over_vectors(x, n, acc, [&](ExpectedLanes& a, int at, auto masked) {
    expected_lanes<F, decltype(masked)::value>(a, load<F32V>(x + at), splat<F32V>(scale[block_of(at)]),
                                               splat<F32V>(scale_inv[block_of(at)]), bins + at);
  });
  QuantStats q;
  for (const ExpectedLanes& a : acc) {
    q.underflow += sum_of(a.underflow);
    q.overflow += sum_of(a.overflow);
    q.saturated += sum_of(a.saturated);
    add_error_lanes(q, a);
  }
  finish_cast(x, i, n, bins, q, into, [&](QuantStats& s, float xi, int at) {
    const ExpectedElement<float> e = stochastic_element<F>(xi, scale[block_of(at)], scale_inv[block_of(at)]);
    add_expected_element(s, xi, e);
    return e.abs_scaled;
  });
}

// One switch from a format to its template, for every cast kernel.
template <template <const FloatFormat&> class Cast, class... Args>
void by_format(CastFormat format, Args... args) {
  switch (format) {
    case CastFormat::kE4M3: Cast<kE4M3>::run(args...); return;
    case CastFormat::kE5M2: Cast<kE5M2>::run(args...); return;
    case CastFormat::kE2M1: Cast<kE2M1>::run(args...); return;
  }
}

template <const FloatFormat& F>
struct NearestCast {
  static void run(const float* x, int n, const float* s, const float* si, int bc, QuantStats* q) { quantize_as<F>(x, n, s, si, bc, q); }
};
template <const FloatFormat& F>
struct StochasticCast {
  static void run(const float* x, int n, const float* s, const float* si, int bc, QuantStats* q) {
    quantize_expected_as<F>(x, n, s, si, bc, q);
  }
};

void quantize(CastFormat format, const float* x, int n, const float* scale, const float* scale_inv, int block_cols,
              QuantStats* into) {
  by_format<NearestCast>(format, x, n, scale, scale_inv, block_cols, into);
}

void quantize_expected(CastFormat format, const float* x, int n, const float* scale, const float* scale_inv,
                       int block_cols, QuantStats* into) {
  by_format<StochasticCast>(format, x, n, scale, scale_inv, block_cols, into);
}

// residual_sums' lanes: each sum in two halves of fp64 lanes.
struct ResidualLanes {
  F64V cross[2] = {}, squares[2] = {}, with_cast[2] = {};
};

template <const FloatFormat& F, bool kStochastic, bool kMaybeNonFinite>
inline void residual_lanes(ResidualLanes& acc, F32V x, F32V d, F32V scale, F32V scale_inv) {
  // The cast, x̂_lo for a nearest one; its expectation x̂_lo + p (x̂_hi - x̂_lo) under stochastic rounding.
  F32V lo, hi{}, p{};
  if constexpr (kStochastic) {
    const ExpectedElement<F32V> e = stochastic_element<F>(x, scale, scale_inv);
    lo = e.low, hi = e.high, p = e.p_high;
  } else {
    lo = quantize_element<F>(x, scale, scale_inv).dequantized;
  }
  F32V xv = x;
  if constexpr (kMaybeNonFinite) {  // their residual is 0, but their x̂ may be NaN
    const I32V finite = (Lanes<F32V>::to_bits(x) & kAbsMask) < kInfBits;
    xv = finite ? x : F32V{};
    d = finite ? d : F32V{};
    lo = finite ? lo : F32V{};
    hi = finite ? hi : F32V{};
    p = finite ? p : F32V{};
  }
  const F64V xs[2] = {widen_low(xv), widen_high(xv)}, ds[2] = {widen_low(d), widen_high(d)};
  const F64V los[2] = {widen_low(lo), widen_high(lo)}, his[2] = {widen_low(hi), widen_high(hi)};
  const F64V ps[2] = {widen_low(p), widen_high(p)};
  for (int h = 0; h < 2; ++h) {
    const F64V q = kStochastic ? los[h] + ps[h] * (his[h] - los[h]) : los[h];
    acc.cross[h] += ds[h] * (xs[h] - q);
    acc.squares[h] += ds[h] * ds[h];
    acc.with_cast[h] += ds[h] * q;
  }
}

template <const FloatFormat& F, bool kStochastic>
void residual_sums_as(const float* __restrict x, const float* __restrict residual, int n, const float* __restrict scale,
                      const float* __restrict scale_inv, int block_cols, ResidualSums* into) {
  ResidualLanes acc[2];
  auto block_of = [&](int at) { return block_cols > 0 ? at / block_cols : 0; };
  int i = over_vectors(x, n, acc, [&](ResidualLanes& a, int at, auto masked) {
    residual_lanes<F, kStochastic, decltype(masked)::value>(a, load<F32V>(x + at), load<F32V>(residual + at),
                                                             splat<F32V>(scale[block_of(at)]),
                                                             splat<F32V>(scale_inv[block_of(at)]));
  });
  for (const ResidualLanes& a : acc) {
    into->cross += sum_of(a.cross);
    into->squares += sum_of(a.squares);
    into->with_cast += sum_of(a.with_cast);
  }
  for (; i < n; ++i) {
    const float xi = x[i];
    if (!(std::fabs(xi) < __builtin_inff())) continue;
    const float s = scale[block_of(i)], si = scale_inv[block_of(i)];
    double q;
    if constexpr (kStochastic) {
      const ExpectedElement<float> e = stochastic_element<F>(xi, s, si);
      q = e.low + static_cast<double>(e.p_high) * (static_cast<double>(e.high) - e.low);
    } else {
      q = quantize_element<F>(xi, s, si).dequantized;
    }
    const double d = residual[i];
    into->cross += d * (xi - q);
    into->squares += d * d;
    into->with_cast += d * q;
  }
}

template <const FloatFormat& F>
struct ResidualOfCast {
  static void run(bool stochastic, const float* x, const float* d, int n, const float* s, const float* si, int bc,
                  ResidualSums* into) {
    stochastic ? residual_sums_as<F, true>(x, d, n, s, si, bc, into) : residual_sums_as<F, false>(x, d, n, s, si, bc, into);
  }
};

void residual_sums(CastFormat format, bool stochastic, const float* x, const float* residual, int n, const float* scale,
                   const float* scale_inv, int block_cols, ResidualSums* into) {
  by_format<ResidualOfCast>(format, stochastic, x, residual, n, scale, scale_inv, block_cols, into);
}

// A vector's lanes from `stride` floats apart: lane l of the result is p[l * stride].
inline F32V load_strided(const float* p, int stride) {
  F32V v;
  for (int l = 0; l < kWidth; ++l) v[l] = p[l * stride];
  return v;
}

void four_over_six_blocks(const BlockRule& rule, const float* __restrict amax, int nb, FourOverSixBlocks* into) {
  for (int b = 0; b < nb; ++b) {
    const FourOverSixCandidates c = four_over_six_candidates(rule, amax[b]);
    into->scale4[b] = c.map4.scale;
    into->inv4[b] = c.map4.scale_inv;
    into->code4[b] = c.code4;
    into->scale6[b] = c.map6.scale;
    into->inv6[b] = c.map6.scale_inv;
    into->code6[b] = c.code6;
  }
}

// Each block's error under both candidates, its elements added in order as TE adds them. A
// vector's lanes are kWidth whole blocks, so each lane's sum is one block's, in element order,
// with no horizontal sums; the blocks left over (and a last, partial block) go one at a time.
void four_over_six_errors(const float* __restrict x, int n, int block, const FourOverSixBlocks& c, float tensor_amax,
                          float* __restrict error4, float* __restrict error6) {
  const int whole = n / block, blocks = (n + block - 1) / block;
  int b = 0;
  for (; b + kWidth <= whole; b += kWidth) {
    const F32V scale4 = load<F32V>(c.scale4 + b), code4 = load<F32V>(c.code4 + b);
    const F32V scale6 = load<F32V>(c.scale6 + b), code6 = load<F32V>(c.code6 + b);
    F32V sum4{}, sum6{};
    for (int k = 0; k < block; ++k) {
      const F32V v = load_strided(x + b * block + k, block);
      sum4 += four_over_six_error(v, scale4, code4, tensor_amax);
      sum6 += four_over_six_error(v, scale6, code6, tensor_amax);
    }
    store(error4 + b, sum4);
    store(error6 + b, sum6);
  }
  for (; b < blocks; ++b) {
    float sum4 = 0.0f, sum6 = 0.0f;
    for (int k = b * block; k < std::min(n, (b + 1) * block); ++k) {
      sum4 += four_over_six_error(x[k], c.scale4[b], c.code4[b], tensor_amax);
      sum6 += four_over_six_error(x[k], c.scale6[b], c.code6[b], tensor_amax);
    }
    error4[b] = sum4;
    error6[b] = sum6;
  }
}

// four_over_six_pick, a column at a time.
void four_over_six_picks(const FourOverSixBlocks& c, const float* __restrict error4, const float* __restrict error6,
                         int nb, float* __restrict scale, float* __restrict scale_inv) {
  for (int b = 0; b < nb; ++b) {
    const bool map4 = four_over_six_takes_map4(error4[b], error6[b]);
    scale[b] = map4 ? c.scale4[b] : c.scale6[b];
    scale_inv[b] = map4 ? c.inv4[b] : c.inv6[b];
  }
}

void four_over_six_scales(const BlockRule& rule, const float* __restrict x, int n, int block,
                          const float* __restrict amax, float* __restrict scale, float* __restrict scale_inv) {
  alignas(64) FourOverSixBlocks c;
  alignas(64) float error4[FourOverSixBlocks::kMaxBlocks], error6[FourOverSixBlocks::kMaxBlocks];
  const int nb = (n + block - 1) / block;
  four_over_six_blocks(rule, amax, nb, &c);
  four_over_six_errors(x, n, block, c, rule.tensor_amax, error4, error6);
  four_over_six_picks(c, error4, error6, nb, scale, scale_inv);
}

}  // namespace

extern const SegmentKernels kKernels;
const SegmentKernels kKernels{FP8SCOPE_ISA_LABEL,   to_float,     add_moments,          block_amax,
                              fold_amax,            max_magnitude_bits16, fold_magnitude_bits16, block_scales,
                              quantize,             quantize_expected,    residual_sums,        four_over_six_blocks,
                              four_over_six_errors, four_over_six_picks,  four_over_six_scales};

}  // namespace fp8scope::cpu::FP8SCOPE_ISA
