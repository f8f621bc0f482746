// Compiled once per ISA level; FP8SCOPE_ISA names the copy (see kernels/CMakeLists.txt).
#include "segment_kernels.h"

#include <cmath>
#include <cstring>

#include "fp8scope/quantize_element.h"
#include "fp8scope/scale_rules.h"

namespace fp8scope::cpu::FP8SCOPE_ISA {
namespace {

constexpr float kInf = __builtin_inff();
constexpr std::uint8_t kNoBin = kHistogramBins;  // zero and non-finite elements are not binned

template <class T, class Convert>
void convert_loop(const void* data, std::int64_t first, int n, float* out, Convert convert) {
  const T* src = static_cast<const T*>(data) + first;
#pragma omp simd
  for (int i = 0; i < n; ++i) out[i] = convert(src[i]);
}

struct Fp8Table {
  float value[256];
  explicit Fp8Table(const FloatFormat& f) {
    for (int c = 0; c < 256; ++c) {
      value[c] = &f == &kE4M3 ? decode<kE4M3>(static_cast<std::uint8_t>(c))
                              : decode<kE5M2>(static_cast<std::uint8_t>(c));
    }
  }
};

void to_float(const void* data, DType dtype, float scale_inv, std::int64_t first, int n, float* out) {
  switch (dtype) {
    case DType::kF32: std::memcpy(out, static_cast<const float*>(data) + first, sizeof(float) * n); return;
    case DType::kBF16: convert_loop<std::uint16_t>(data, first, n, out, bf16_to_float); return;
    case DType::kF16: convert_loop<std::uint16_t>(data, first, n, out, half_to_float); return;
    case DType::kF64: convert_loop<double>(data, first, n, out, [](double v) { return static_cast<float>(v); }); return;
    case DType::kE4M3:
    case DType::kE5M2: {
      static const Fp8Table e4m3(kE4M3), e5m2(kE5M2);
      const float* table = dtype == DType::kE4M3 ? e4m3.value : e5m2.value;
      convert_loop<std::uint8_t>(data, first, n, out,
                                 [table, scale_inv](std::uint8_t c) { return mul_rn(table[c], scale_inv); });
      return;
    }
  }
}

void add_moments(const float* x, int n, TensorMoments* into) {
  std::uint32_t nan = 0, inf = 0, finite = 0, nonzero = 0;
  float amax = 0.0f, amin = kFloatMax;
  double sum = 0.0, squares = 0.0;
#pragma omp simd reduction(+ : nan, inf, finite, nonzero, sum, squares) reduction(max : amax) reduction(min : amin)
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    const bool is_nan = x[i] != x[i];
    const bool ok = a < kInf;
    nan += is_nan;
    inf += a == kInf;
    finite += ok;
    nonzero += ok && a != 0.0f;
    amax = std::fmax(amax, ok ? a : 0.0f);
    amin = std::fmin(amin, (ok && a != 0.0f) ? a : kFloatMax);
    const double v = ok ? x[i] : 0.0;
    sum += v;
    squares += v * v;
  }
  TensorMoments m;
  m.numel = static_cast<std::uint64_t>(n);
  m.nan = nan;
  m.inf = inf;
  m.finite = finite;
  m.nonzero = nonzero;
  m.amax = amax;
  m.amin = amin;
  m.sum = sum;
  m.sum_squares = squares;
  if (finite > 0) {
    const double mean = sum / finite;
    double m2 = 0.0;
#pragma omp simd reduction(+ : m2)
    for (int i = 0; i < n; ++i) {
      const double d = std::fabs(x[i]) < kInf ? x[i] - mean : 0.0;
      m2 += d * d;
    }
    m.m2 = m2;
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

// Counts bins[0..n) into hist. A segment's values cluster in a few binades, so each bin in the
// segment's range is counted with a vectorized compare-and-sum; a wide spread falls back to
// scalar increments.
void add_histogram(const std::uint8_t* bins, int n, std::uint64_t* hist) {
  std::uint8_t lo = kNoBin, hi = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (int i = 0; i < n; ++i) {
    const std::uint8_t b = bins[i];
    lo = b < lo ? b : lo;
    hi = (b != kNoBin && b > hi) ? b : hi;
  }
  if (lo == kNoBin) return;
  if (hi - lo < 12) {
    for (int b = lo; b <= hi; ++b) {
      std::uint32_t count = 0;
#pragma omp simd reduction(+ : count)
      for (int i = 0; i < n; ++i) count += bins[i] == b;
      hist[b] += count;
    }
    return;
  }
  std::uint32_t local[4][kHistogramBins + 1] = {};
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    ++local[0][bins[i]];
    ++local[1][bins[i + 1]];
    ++local[2][bins[i + 2]];
    ++local[3][bins[i + 3]];
  }
  for (; i < n; ++i) ++local[0][bins[i]];
  for (int b = 0; b < kHistogramBins; ++b) hist[b] += local[0][b] + local[1][b] + local[2][b] + local[3][b];
}

template <const FloatFormat& F, bool kPerElement>
void quantize_loop(const float* __restrict x, int n, const float* __restrict scale,
                   const float* __restrict scale_inv, QuantStats* into) {
  std::uint8_t bins[kSegmentCols];
  std::uint32_t under = 0, over = 0, saturated = 0;
  double squared_error = 0.0, dot = 0.0, dequant_squares = 0.0;
  const float s0 = scale[0], si0 = scale_inv[0];
#pragma omp simd reduction(+ : under, over, saturated, squared_error, dot, dequant_squares)
  for (int i = 0; i < n; ++i) {
    const float xi = x[i];
    const QuantizedElement e = quantize_element<F>(xi, kPerElement ? scale[i] : s0, kPerElement ? scale_inv[i] : si0);
    const bool ok = std::fabs(xi) < kInf;
    under += ok && e.underflow;
    over += ok && e.overflow;
    saturated += ok && e.saturated;
    const double xd = ok ? xi : 0.0;
    const double qd = ok ? e.dequantized : 0.0;
    const double d = xd - qd;
    squared_error += d * d;
    dot += xd * qd;
    dequant_squares += qd * qd;
    bins[i] = (ok && xi != 0.0f) ? static_cast<std::uint8_t>(log2_bin(e.abs_scaled)) : kNoBin;
  }
  into->underflow += under;
  into->overflow += over;
  into->saturated += saturated;
  into->squared_error += squared_error;
  into->dot += dot;
  into->dequant_squares += dequant_squares;
  add_histogram(bins, n, into->histogram);
}

void quantize(Fp8Format format, const float* x, int n, const float* scale, const float* scale_inv, bool per_element,
              QuantStats* into) {
  if (format == Fp8Format::kE4M3) {
    per_element ? quantize_loop<kE4M3, true>(x, n, scale, scale_inv, into)
                : quantize_loop<kE4M3, false>(x, n, scale, scale_inv, into);
  } else {
    per_element ? quantize_loop<kE5M2, true>(x, n, scale, scale_inv, into)
                : quantize_loop<kE5M2, false>(x, n, scale, scale_inv, into);
  }
}

}  // namespace

extern const SegmentKernels kKernels;
const SegmentKernels kKernels{FP8SCOPE_ISA_LABEL, to_float, add_moments, block_amax, quantize};

}  // namespace fp8scope::cpu::FP8SCOPE_ISA
