#include "element_comparison.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <thread>

#include "fp8scope/checkpoint/producer_cast.h"
#include "row_kernel.h"

// The vector helpers are always inlined into the row kernels, so no vector crosses a call: GCC's
// note that 32-byte vectors pass differently without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace fp8scope::checkpoint {
namespace {

// One thread's row buffers, a row of the weight each.
struct RowBuffers {
  std::vector<std::uint8_t> codes;
  std::vector<float> values, x, code_values, cast, cast_expected;
  explicit RowBuffers(std::int64_t cols)
      : codes(static_cast<std::size_t>(cols)),
        values(codes.size()),
        x(codes.size()),
        code_values(codes.size()),
        cast(codes.size()),
        cast_expected(codes.size()) {}
};

// Runs fn(state, buffers, e, r) over every (expert, row) of the weight, the rows cut into one
// contiguous share per core, each share with a State of its own; returns the states in order.
template <class State, class Fn>
std::vector<State> over_rows(const QuantizedWeight& w, const State& initial, Fn fn) {
  const std::int64_t total = w.experts * w.rows;
  const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  // A share below ~1 MiB of elements is not worth a thread.
  const std::int64_t shares = std::clamp<std::int64_t>(total * w.cols / (1 << 20), 1, std::min<std::int64_t>(cores, 16));
  std::vector<State> states(static_cast<std::size_t>(shares), initial);
  auto run = [&](std::int64_t k) {
    RowBuffers b(w.cols);
    for (std::int64_t i = total * k / shares; i < total * (k + 1) / shares; ++i) {
      fn(states[static_cast<std::size_t>(k)], b, i / w.rows, i % w.rows);
    }
  };
  std::vector<std::thread> threads;
  for (std::int64_t k = 1; k < shares; ++k) threads.emplace_back(run, k);
  run(0);
  for (std::thread& t : threads) t.join();
  return states;
}

using D4 = double __attribute__((vector_size(32)));
using F4 = float __attribute__((vector_size(16)));
using I4 = std::int64_t __attribute__((vector_size(32)));

// Error sums of a row in four fp64 lanes combined in a fixed order at the end (the same sums on
// every ISA; products of floats are exact in fp64). Non-finite pairs are left out, as add() does.
FP8SCOPE_ROW_KERNEL void add_row(const float* x, const float* v, std::int64_t n, GemmErrorSums& s) {
  D4 se{}, dot{}, rs{}, ts{}, mae{}, mar{};
  I4 count{};
  const D4 finite_max = D4{} + static_cast<double>(FLT_MAX);
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 xf, vf;
    std::memcpy(&xf, x + i, sizeof xf);
    std::memcpy(&vf, v + i, sizeof vf);
    D4 a = __builtin_convertvector(xf, D4), b = __builtin_convertvector(vf, D4);
    const D4 abs_a = a < 0 ? -a : a, abs_b = b < 0 ? -b : b;
    const I4 ok = (abs_a <= finite_max) & (abs_b <= finite_max);
    a = ok ? a : D4{};
    b = ok ? b : D4{};
    const D4 d = b - a, abs_d = d < 0 ? -d : d, kept_a = ok ? abs_a : D4{};
    se += d * d;
    dot += a * b;
    rs += a * a;
    ts += b * b;
    mae = abs_d > mae ? abs_d : mae;
    mar = kept_a > mar ? kept_a : mar;
    count -= ok;
  }
  GemmErrorSums row;
  for (int k = 0; k < 4; ++k) {
    GemmErrorSums lane;
    lane.squared_error = se[k], lane.dot = dot[k], lane.ref_squares = rs[k], lane.test_squares = ts[k];
    lane.max_abs_error = mae[k], lane.max_abs_ref = mar[k], lane.count = count[k];
    row.merge(lane);
  }
  for (; i < n; ++i) {
    if (std::isfinite(x[i]) && std::isfinite(v[i])) row.add(x[i], v[i]);
  }
  s.merge(row);
}

// |x|'s bits, NaN as 0: nonnegative floats order as their bits, so maxima are integer maxima.
std::uint32_t magnitude_bits(float x) {
  const std::uint32_t a = float_bits(x) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0u : a;
}

FP8SCOPE_ROW_KERNEL void bf16_row(const std::uint8_t* p, std::size_t n, float* out) {
  for (std::size_t c = 0; c < n; ++c) out[c] = bits_float(static_cast<std::uint32_t>(p[2 * c] | p[2 * c + 1] << 8) << 16);
}

// Eight lanes of float bits (GCC vector extensions: two SSE2 operations on the baseline, one on
// AVX2 and AVX-512).
using U8 = std::uint32_t __attribute__((vector_size(32)));
using I8 = std::int32_t __attribute__((vector_size(32)));
using F8 = float __attribute__((vector_size(32)));


[[gnu::always_inline]] inline U8 bits8(const float* p) {
  U8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline F8 floats8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline U8 max8(U8 a, U8 b) { return a > b ? a : b; }
[[gnu::always_inline]] inline U8 min8(U8 a, U8 b) { return a < b ? a : b; }
[[gnu::always_inline]] inline std::uint32_t max_lane(U8 v) {
  std::uint32_t m = 0;
  for (int k = 0; k < 8; ++k) m = std::max(m, v[k]);
  return m;
}
[[gnu::always_inline]] inline std::uint32_t min_lane(U8 v) {
  std::uint32_t m = 0xFFFFFFFFu;
  for (int k = 0; k < 8; ++k) m = std::min(m, v[k]);
  return m;
}
[[gnu::always_inline]] inline std::uint32_t sum_lanes(I8 v) {
  std::uint32_t s = 0;
  for (int k = 0; k < 8; ++k) s += static_cast<std::uint32_t>(v[k]);
  return s;
}

constexpr std::uint32_t kAbs = 0x7FFFFFFFu, kInf = 0x7F800000u;

// Each block's largest |x| of a row (as magnitude_bits), folded into the row's grid cells.
FP8SCOPE_ROW_KERNEL void row_block_max(const float* x, std::int64_t n, std::int64_t block, std::uint32_t* grid) {
  for (std::int64_t c0 = 0; c0 < n; c0 += block) {
    const std::int64_t end = std::min(c0 + block, n);
    U8 m8{};
    std::int64_t c = c0;
    for (; c + 8 <= end; c += 8) {
      const U8 a = bits8(x + c) & kAbs;
      m8 = max8(m8, a > kInf ? U8{} : a);
    }
    std::uint32_t m = max_lane(m8);
    for (; c < end; ++c) m = std::max(m, magnitude_bits(x[c]));
    std::uint32_t& cell = grid[c0 / block];
    cell = std::max(cell, m);
  }
}

// Elements whose reference x is finite and whose a and b differ (-0 == +0; NaN differs).
FP8SCOPE_ROW_KERNEL std::uint64_t count_unequal(const float* x, const float* a, const float* b, std::int64_t n) {
  I8 count{};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) count -= ((bits8(x + i) & kAbs) < kInf) & (floats8(a + i) != floats8(b + i));
  std::uint64_t total = sum_lanes(count);
  for (; i < n; ++i) total += (std::fabs(x[i]) <= FLT_MAX) & (a[i] != b[i]);
  return total;
}

struct Census {
  std::uint64_t nonfinite = 0, at_max = 0;
  std::uint32_t amax = 0, amin = kInf;  // magnitude bits of the nonzero finite values
};

FP8SCOPE_ROW_KERNEL void census_row(const float* code_values, const float* values, std::int64_t n, float code_max,
                                    Census& s) {
  const std::uint32_t max_bits = float_bits(code_max);
  I8 nonfinite{}, at_max{};
  U8 hi{}, lo = U8{} + kInf;
  std::int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const U8 code = bits8(code_values + c) & kAbs, a = bits8(values + c) & kAbs;
    nonfinite -= code >= kInf;
    at_max -= code == max_bits;
    const I8 counted = (a != 0u) & (a < kInf);
    hi = max8(hi, counted ? a : U8{});
    lo = min8(lo, counted ? a : U8{} + kInf);
  }
  std::uint32_t h = std::max(s.amax, max_lane(hi)), l = std::min(s.amin, min_lane(lo));
  s.nonfinite += sum_lanes(nonfinite), s.at_max += sum_lanes(at_max);
  for (; c < n; ++c) {
    const std::uint32_t code = float_bits(code_values[c]) & kAbs, a = float_bits(values[c]) & kAbs;
    s.nonfinite += code >= kInf;
    s.at_max += code == max_bits;
    if (a != 0 && a < kInf) h = std::max(h, a), l = std::min(l, a);
  }
  s.amax = h, s.amin = l;
}

}  // namespace

void Reference::row(const QuantizedWeight& w, std::int64_t e, std::int64_t r, float* out) const {
  const std::uint8_t* base = mapped.bytes().data();
  const auto n = static_cast<std::size_t>(w.cols);
  if (transposed) {
    for (std::size_t c = 0; c < n; ++c) {
      out[c] = load_element(base, static_cast<std::size_t>((e * w.cols + static_cast<std::int64_t>(c)) * w.rows + r), dtype, 1.0f);
    }
    return;
  }
  const auto first = static_cast<std::size_t>((e * w.rows + r) * w.cols);
  switch (dtype) {
    case DType::kF32: std::memcpy(out, base + 4 * first, 4 * n); return;
    case DType::kBF16: return bf16_row(base + 2 * first, n, out);
    default:
      for (std::size_t c = 0; c < n; ++c) out[c] = load_element(base, first + c, dtype, 1.0f);
      return;
  }
}

CodeCensus census(const WeightDecoder& dec) {
  const QuantizedWeight& w = dec.weight();
  float code_max = 0;  // the format's largest finite value
  for (int c = 0; c < 256; ++c) {
    const float v = std::fabs(dec.code_value(static_cast<std::uint8_t>(c)));
    if (v <= FLT_MAX && v > code_max) code_max = v;
  }
  const std::vector<Census> shares = over_rows(w, Census{}, [&](Census& s, RowBuffers& b, std::int64_t e, std::int64_t r) {
    dec.row(e, r, b.codes.data(), b.code_values.data(), b.values.data());
    census_row(b.code_values.data(), b.values.data(), w.cols, code_max, s);
  });
  Census all;
  for (const Census& s : shares) {
    all.nonfinite += s.nonfinite, all.at_max += s.at_max;
    all.amax = std::max(all.amax, s.amax), all.amin = std::min(all.amin, s.amin);
  }
  CodeCensus out;
  out.nonfinite = all.nonfinite, out.at_max = all.at_max;
  out.amax = bits_float(all.amax);
  out.amin = all.amin == kInf ? 0.0 : bits_float(all.amin);
  return out;
}

std::vector<float> block_amaxes(const WeightDecoder& dec, const Reference& ref, float* tensor_amax) {
  const QuantizedWeight& w = dec.weight();
  const std::vector<std::uint32_t> zero(dec.scales().size(), 0u);
  const std::vector<std::vector<std::uint32_t>> shares =
      over_rows(w, zero, [&](std::vector<std::uint32_t>& amax, RowBuffers& b, std::int64_t e, std::int64_t r) {
        ref.row(w, e, r, b.x.data());
        row_block_max(b.x.data(), w.cols, w.block_cols, amax.data() + dec.grid_index(e, r / w.block_rows, 0));
      });
  std::vector<float> out(zero.size(), 0.0f);
  std::uint32_t all = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint32_t m = 0;
    for (const std::vector<std::uint32_t>& s : shares) m = std::max(m, s[i]);
    out[i] = bits_float(m);
    all = std::max(all, m);
  }
  *tensor_amax = bits_float(all);
  return out;
}

ElementComparison compare_elements(const WeightDecoder& dec, Convention c, const Reference& ref,
                                   const std::vector<float>& expected_scales) {
  const QuantizedWeight& w = dec.weight();
  const std::vector<ElementComparison> shares =
      over_rows(w, ElementComparison{}, [&](ElementComparison& out, RowBuffers& b, std::int64_t e, std::int64_t r) {
        ref.row(w, e, r, b.x.data());
        dec.row(e, r, b.codes.data(), b.code_values.data(), b.values.data());
        add_row(b.x.data(), b.values.data(), w.cols, out.sums);
        const std::size_t cells = dec.grid_index(e, r / w.block_rows, 0);
        const std::size_t row_cells = static_cast<std::size_t>(w.grid_cols);
        const float* stored = dec.scales().data() + cells;
        const float* expected = expected_scales.data() + cells;
        producer_values(w, c, b.x.data(), stored, w.block_cols, w.cols, b.cast.data());
        const std::uint64_t differing = count_unequal(b.x.data(), b.code_values.data(), b.cast.data(), w.cols);
        out.differing += differing;
        if (std::memcmp(stored, expected, row_cells * sizeof(float)) == 0) {
          out.differing_from_expected += differing;
        } else {
          producer_values(w, c, b.x.data(), expected, w.block_cols, w.cols, b.cast_expected.data());
          out.differing_from_expected += count_unequal(b.x.data(), b.code_values.data(), b.cast_expected.data(), w.cols);
        }
        if (differing == 0) return;
        for (std::int64_t col = 0; col < w.cols; ++col) {  // the exact grid steps of those that differ
          const auto i = static_cast<std::size_t>(col);
          if (!(std::fabs(b.x[i]) <= FLT_MAX) || b.code_values[i] == b.cast[i]) continue;
          const std::uint8_t producer = producer_code(w, c, b.x[i], stored[col / w.block_cols]);
          out.off_by_more += code_steps(*w.codes_format, b.codes[i], producer) > 1;
        }
      });
  ElementComparison all;
  for (const ElementComparison& s : shares) {
    all.sums.merge(s.sums);
    all.differing += s.differing, all.off_by_more += s.off_by_more;
    all.differing_from_expected += s.differing_from_expected;
  }
  return all;
}

double sampled_cosine(const WeightDecoder& dec, const Reference& ref) {
  const QuantizedWeight& w = dec.weight();
  GemmErrorSums s;
  RowBuffers b(w.cols);
  for (std::int64_t r = 0; r < std::min<std::int64_t>(w.rows, 64); ++r) {
    ref.row(w, 0, r, b.x.data());
    dec.row(0, r, b.codes.data(), b.code_values.data(), b.values.data());
    add_row(b.x.data(), b.values.data(), w.cols, s);
  }
  return cosine_of(s);
}

double relative_error(const GemmErrorSums& s) {
  return s.ref_squares > 0 ? std::sqrt(s.squared_error / s.ref_squares) : 0.0;
}

double cosine_of(const GemmErrorSums& s) {
  return s.ref_squares > 0 && s.test_squares > 0 ? s.dot / std::sqrt(s.ref_squares * s.test_squares) : 1.0;
}

double relative_error_as_fnuz(const GemmErrorSums& s) {
  if (s.ref_squares <= 0) return 0.0;
  return std::sqrt(std::max(0.0, s.ref_squares - s.dot + 0.25 * s.test_squares) / s.ref_squares);
}

}  // namespace fp8scope::checkpoint
