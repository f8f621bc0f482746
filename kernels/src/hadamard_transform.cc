#include "fp8scope/kernels/hadamard_transform.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "fp8scope/kernels/dtype.h"
#include "cpu/segment_kernels.h"

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

// One chunk of the transform: the 16 rows of group g, columns [k0, k0 + n) of x, exactly (fp64),
// rounded to fp32 and BF16 as TE's kernel writes them. Each row j of the results is contiguous
// along k, so every pass over them vectorizes.
struct Chunk {
  double exact[kHadamardSize][kChunk];
  std::uint16_t bits[kHadamardSize][kChunk];  // the BF16 TE casts
  alignas(64) float rounded[kHadamardSize][kChunk];  // the same, as floats
  int n = 0;
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// One copy per x86-64 level, chosen at load time, as the segment kernels are (AVX2 packs the BF16
// conversions, AVX-512 twice as wide).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void transform_chunk(const TensorView& x, std::int64_t g, std::int64_t k0, Chunk& c) {
  const int n = c.n = static_cast<int>(std::min<std::int64_t>(kChunk, x.cols - k0));
  float row[kChunk], sum32[kChunk];
  auto& v = c.exact;
  for (int i = 0; i < kHadamardSize; ++i) {
    load_row(x, g * kHadamardSize + i, k0, n, row);
    // TE's matrix holds each entry already signed and quartered (±0.25), so every product is
    // exact and no partial sum is larger than the inputs (hadamard_transform_utils.cuh:161).
    const double quarter = 0.25 * kHadamardSigns[i];
    for (int k = 0; k < n; ++k) v[i][k] = row[k] * quarter;
  }
  // Sylvester's butterfly: after the four stages v[j] = sum_i (-1)^popcount(i & j) v[i]. In fp64 a
  // sum of 16 such products is exact unless their magnitudes span more than 2^25; it is rounded
  // once to fp32, the MMA's accumulator (whose order of additions is not specified), and to BF16
  // as TE writes it (cvt.rn.bf16x2.f32, hadamard_transform_utils.cuh:97-109).
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
  for (int j = 0; j < kHadamardSize; ++j) {
    for (int k = 0; k < n; ++k) sum32[k] = static_cast<float>(v[j][k]);
    for (int k = 0; k < n; ++k) c.bits[j][k] = float_to_bf16(sum32[k]);
    for (int k = 0; k < n; ++k) c.rounded[j][k] = bf16_to_float(c.bits[j][k]);
  }
}

// Threads for `items` units of work over `elements` elements: every hardware thread, each with at
// least 64 Ki elements.
int thread_count(std::int64_t items, std::int64_t elements) {
  return static_cast<int>(std::min<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()),
                                                 std::min(items, std::max<std::int64_t>(1, elements >> 16))));
}

// fn(k, begin, end) for `threads` contiguous runs of [0, items), run k on thread k (0: the caller).
template <class Fn>
void run_split(int threads, std::int64_t items, Fn fn) {
  std::vector<std::thread> pool;
  for (int k = 1; k < threads; ++k) pool.emplace_back([&, k] { fn(k, items * k / threads, items * (k + 1) / threads); });
  fn(0, 0, items / threads);
  for (std::thread& th : pool) th.join();
}

}  // namespace

HadamardTransformed hadamard_columns(const TensorView& x) {
  HadamardTransformed t;
  hadamard_columns(x, t);
  return t;
}

// Every hardware thread takes a contiguous run of groups; they write disjoint stretches of t, each
// chunk's values in one stream, as the copy lays them (column k's 16 values in a row).
void hadamard_columns(const TensorView& x, HadamardTransformed& t) {
  t.columns = x.cols;
  t.padded_rows = (x.rows + kHadamardSize - 1) / kHadamardSize * kHadamardSize;
  t.bf16.resize(static_cast<std::size_t>(t.numel()));  // every element is written below
  const std::int64_t groups = t.padded_rows / kHadamardSize;
  run_split(thread_count(groups, t.numel()), groups, [&](int, std::int64_t begin, std::int64_t end) {
    Chunk c;
    for (std::int64_t g = begin; g < end; ++g)
      for (std::int64_t k0 = 0; k0 < x.cols; k0 += kChunk) {
        transform_chunk(x, g, k0, c);
        std::uint16_t* out = t.bf16.data() + t.index(k0, g * kHadamardSize);
        for (int k = 0; k < c.n; ++k)
          for (int j = 0; j < kHadamardSize; ++j) out[k * kHadamardSize + j] = c.bits[j][k];
      }
  });
}

Result<QuantStats> against_exact_transform(const TensorView& x, const QuantSpec& spec, float te_amax,
                                           const QuantStats& measured) {
  if (!spec.per_block() || spec.block_rows != 1 || spec.block_cols != kHadamardSize || spec.row_scaled ||
      spec.rule == ScaleRule::kBlockNvfp4FourOverSix) {
    return Status::error("hadamard transform: a transformed copy is cast in 1x16 blocks of one scale rule (TE refuses "
                         "4over6, row scaling and 2-D blocks with the transform)");
  }
  const cpu::SegmentKernels& kernels = *cpu::runnable_segment_kernels().front();
  const BlockRule rule = block_rule_for(spec, te_amax);
  const std::int64_t groups = (x.rows + kHadamardSize - 1) / kHadamardSize;
  const int threads = thread_count(groups, groups * kHadamardSize * x.cols);
  std::vector<cpu::ResidualSums> part(static_cast<std::size_t>(threads));
  // The transform again, chunk by chunk, each laid out as the copy is (column k's 16 values, one
  // block, in a row) and cast in L1 where it is made, instead of a stored residual twice the
  // copy's size.
  run_split(threads, groups, [&](int k, std::int64_t begin, std::int64_t end) {
    constexpr int kChunkElements = kChunk * kHadamardSize;
    Chunk c;
    alignas(64) float off[kHadamardSize][kChunk];
    alignas(64) float b[kChunkElements], residual[kChunkElements];
    float amax[kChunk], scale[kChunk], scale_inv[kChunk];
    for (std::int64_t g = begin; g < end; ++g)
      for (std::int64_t k0 = 0; k0 < x.cols; k0 += kChunk) {
        transform_chunk(x, g, k0, c);
        for (int j = 0; j < kHadamardSize; ++j)
          for (int kk = 0; kk < c.n; ++kk) {  // 0 where the BF16 is not finite: the engines skip those
            const float rounded = c.rounded[j][kk], d = static_cast<float>(c.exact[j][kk] - rounded);
            off[j][kk] = (float_bits(rounded) & 0x7F800000u) != 0x7F800000u ? d : 0.0f;
          }
        for (int kk = 0; kk < c.n; ++kk)
          for (int j = 0; j < kHadamardSize; ++j) {
            b[kk * kHadamardSize + j] = c.rounded[j][kk];
            residual[kk * kHadamardSize + j] = off[j][kk];
          }
        const int n = c.n * kHadamardSize;
        kernels.block_amax(b, n, kHadamardSize, amax);
        kernels.block_scales(rule, amax, c.n, scale, scale_inv);
        kernels.residual_sums(spec.format, spec.stochastic, b, residual, n, scale, scale_inv, kHadamardSize,
                              &part[static_cast<std::size_t>(k)]);
      }
  });
  // Added in thread order, so the result does not depend on timing.
  QuantStats out = measured;
  for (const cpu::ResidualSums& p : part) {
    out.squared_error += 2 * p.cross + p.squares;
    out.dot += p.with_cast;
  }
  return out;
}

}  // namespace fp8scope
