#include "fp8scope/kernels/hadamard_transform.h"

#include <algorithm>
#include <thread>

#include "fp8scope/kernels/dtype.h"

namespace fp8scope {
namespace {

constexpr int kChunk = 64;  // columns of x transformed together: 16 x 64 floats stay in L1

// Row r of x, columns [k0, k0 + n), as fp32; rows past x's are zeros. Inlined into each ISA copy.
[[gnu::always_inline]] inline void load_row(const TensorView& x, std::int64_t r, std::int64_t k0, int n, float* out) {
  if (r >= x.rows) {
    for (int k = 0; k < n; ++k) out[k] = 0.0f;
    return;
  }
  const std::size_t first = static_cast<std::size_t>(r * x.cols + k0);
  if (x.dtype == DType::kBF16) {
    const auto* bits = static_cast<const std::uint16_t*>(x.data) + first;
    for (int k = 0; k < n; ++k) out[k] = bf16_to_float(bits[k]);
  } else if (x.dtype == DType::kF32) {
    const auto* v = static_cast<const float*>(x.data) + first;
    for (int k = 0; k < n; ++k) out[k] = v[k];
  } else {
    for (int k = 0; k < n; ++k) out[k] = load_element(x.data, first + static_cast<std::size_t>(k), x.dtype, x.scale_inv);
  }
}

// Groups [g_begin, g_end) of 16 rows: each group's rows are read kChunk columns at a time, and
// the chunk's transformed values written in one stream (kChunk x 16 BF16s).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// One copy per x86-64 level, chosen at load time, as the segment kernels are (AVX2 packs the BF16
// conversions, AVX-512 twice as wide).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void transform_groups(const TensorView& x, HadamardTransformed& t, std::int64_t g_begin, std::int64_t g_end) {
  float row[kChunk];
  double v[kHadamardSize][kChunk];
  for (std::int64_t g = g_begin; g < g_end; ++g) {
    for (std::int64_t k0 = 0; k0 < x.cols; k0 += kChunk) {
      const int n = static_cast<int>(std::min<std::int64_t>(kChunk, x.cols - k0));
      for (int i = 0; i < kHadamardSize; ++i) {
        load_row(x, g * kHadamardSize + i, k0, n, row);
        // TE's matrix holds each entry already signed and quartered (±0.25), so every product is
        // exact and no partial sum is larger than the inputs (hadamard_transform_utils.cuh:161).
        const double quarter = 0.25 * kHadamardSigns[i];
        for (int k = 0; k < n; ++k) v[i][k] = row[k] * quarter;
      }
      // Sylvester's butterfly: after the four stages v[j] = sum_i (-1)^popcount(i & j) v[i]. In
      // fp64 a sum of 16 such products is exact unless their magnitudes span more than 2^25; it is
      // rounded once to fp32, the MMA's accumulator (whose order of additions is not specified), and to BF16 as TE writes them
      // (cvt.rn.bf16x2.f32, hadamard_transform_utils.cuh:97-109).
      for (int half = 1; half < kHadamardSize; half *= 2) {
        for (int i = 0; i < kHadamardSize; ++i) {
          if (i & half) continue;
          for (int k = 0; k < n; ++k) {
            const double a = v[i][k], b = v[i + half][k];
            v[i][k] = a + b;
            v[i + half][k] = a - b;
          }
        }
      }
      std::uint16_t* out = t.bf16.data() + t.index(k0, g * kHadamardSize);
      for (int k = 0; k < n; ++k)
        for (int j = 0; j < kHadamardSize; ++j) out[k * kHadamardSize + j] = float_to_bf16(static_cast<float>(v[j][k]));
    }
  }
}

}  // namespace

// Every hardware thread takes a contiguous run of groups; they write disjoint stretches of t.
HadamardTransformed hadamard_columns(const TensorView& x) {
  HadamardTransformed t;
  hadamard_columns(x, t);
  return t;
}

void hadamard_columns(const TensorView& x, HadamardTransformed& t) {
  t.columns = x.cols;
  t.padded_rows = (x.rows + kHadamardSize - 1) / kHadamardSize * kHadamardSize;
  t.bf16.resize(static_cast<std::size_t>(t.numel()));  // every element is written below
  const std::int64_t groups = t.padded_rows / kHadamardSize;
  const std::int64_t threads = std::min<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()),
                                                      std::min(groups, std::max<std::int64_t>(1, t.numel() >> 16)));
  std::vector<std::thread> pool;
  for (std::int64_t k = 1; k < threads; ++k) {
    pool.emplace_back([&, k] { transform_groups(x, t, groups * k / threads, groups * (k + 1) / threads); });
  }
  transform_groups(x, t, 0, groups / threads);
  for (std::thread& th : pool) th.join();
}

}  // namespace fp8scope
