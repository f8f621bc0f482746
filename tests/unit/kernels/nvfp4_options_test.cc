// NVFP4's options (nvfp4_4over6, nvfp4_sr, nvfp4_row) against oracles written from Transformer
// Engine's source (d0067d0), sharing no code with the engines: E2M1 and E4M3 rounding by searching
// their grids, TE's fp32 operations in TE's order, sums in long double.
// - 4over6 (PR #2972): cast/nvfp4/quantize_4over6_nvfp4.cuh compute_scale_pair (:125-146), the
//   MAE criterion accumulate_dequant_error (:190-202), the strict pick err_map4 < err_map6
//   (:494-496), the 16x16 tree over rows (:347-356); per-tensor scale from 256 (core_nvfp4.cuh:81-95);
//   dequantization q * (code * amax * fp32(1 / 1536)) (dequantize_nvfp4.cuh:68-69).
// - Stochastic rounding: util/ptx.cuh:532-547, the software twin of cvt.rs for GPUs without it.
// - Row scaling (PR #2931): cast/nvfp4/specialized/quantize_transpose_nvfp4_tuned_1D.cuh:170-176,
//   326-328; core_nvfp4.cuh:51-52; dequantize_nvfp4.cuh:66-69.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/hadamard_transform.h"
#include "fp8scope/kernels/quantize_element.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp4_recipe_cases.h"
#include "te_stochastic_rounding.h"

using namespace fp8scope;
using fp8scope::testing::DrawMean;
using fp8scope::testing::te_draw_mean;

namespace {

// ---- Grids, searched --------------------------------------------------------------------------

constexpr float kE2M1Grid[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Round to nearest, ties to the even code, saturating at 6 (cvt.rn.satfinite.e2m1x2.f32), sign kept.
float e2m1_rn(float y) {
  const float a = std::fabs(y);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float d = std::fabs(a - kE2M1Grid[c]), b = std::fabs(a - kE2M1Grid[best]);
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  if (a >= 7.0f) best = 7;  // past 6 the next point would be 8: clipped to 6
  return std::copysign(kE2M1Grid[best], y);
}

bool e2m1_overflows(float y) { return std::fabs(y) >= 7.0f; }  // the tie at 7 rounds to 8's even code

// A nonnegative fp32 to the nearest UE4M3 value (ties to the even code), saturating at 448.
float e4m3_rn(float v) {
  float best = 0.0f;
  int best_code = 0;
  for (int c = 1; c < 127; ++c) {
    const int e = c >> 3, m = c & 7;
    const float value = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
    const float d = std::fabs(v - value), b = std::fabs(v - best);
    if (d < b || (d == b && c % 2 == 0)) {
      best = value;
      best_code = c;
    }
  }
  (void)best_code;
  return v >= 448.0f ? 448.0f : best;
}

float te_amax(const std::vector<float>& x, std::size_t first, std::size_t count, std::size_t stride = 1) {
  float a = 0.0f;
  for (std::size_t i = 0; i < count; ++i) {
    const float v = std::fabs(x[first + i * stride]);
    a = v > a ? v : a;  // fmaxf: NaN skipped, Inf kept
  }
  return a;
}

float encode_scale(float amax, float e4m3_max) {
  const float s = std::fmin(e4m3_max * 6.0f / amax, FLT_MAX);
  return (amax == 0.0f || s == 0.0f) ? 1.0f : s;
}

// ---- What a cast did ---------------------------------------------------------------------------

struct Oracle {
  long double underflow = 0, overflow = 0, saturated = 0, squared_error = 0, dot = 0;
  float scale_min = FLT_MAX, scale_max = 0.0f;
  int map4 = 0, map6 = 0;  // 4over6's picks

  void scale(float s) {
    scale_min = std::fmin(scale_min, s);
    scale_max = std::fmax(scale_max, s);
  }
  void element(float x, float cast_scale, float scale_inv) {
    if (!std::isfinite(x)) return;
    const float y = x * cast_scale;
    const float q = e2m1_rn(y);
    const float xq = q * scale_inv;
    underflow += x != 0.0f && q == 0.0f;
    overflow += e2m1_overflows(y);
    saturated += std::fabs(q) == 6.0f;
    squared_error += (static_cast<long double>(x) - xq) * (static_cast<long double>(x) - xq);
    dot += static_cast<long double>(x) * xq;
  }
};

void check_same(const QuantStats& got, const Oracle& want) {
  CHECK(got.underflow == static_cast<double>(want.underflow));
  CHECK(got.overflow == static_cast<double>(want.overflow));
  CHECK(got.saturated == static_cast<double>(want.saturated));
  CHECK(got.scale_min == want.scale_min);
  CHECK(got.scale_max == want.scale_max);
  CHECK(static_cast<long double>(got.squared_error) == Approx(static_cast<double>(want.squared_error)).epsilon(1e-12));
  CHECK(static_cast<long double>(got.dot) == Approx(static_cast<double>(want.dot)).epsilon(1e-12));
}

// ---- 4over6 --------------------------------------------------------------------------------------

struct Candidate {
  float code, scale, scale_inv;
};

Candidate candidate(float block_amax, float s_enc, float s_dec, float amax, float expand) {
  const float base = block_amax / 6.0f * s_enc;
  Candidate c;
  c.code = e4m3_rn(std::fmin(base * expand, 448.0f));
  c.scale = std::fmin(1.0f / (c.code * s_dec), FLT_MAX);
  c.scale_inv = c.code * amax * (1.0f / 1536.0f);
  return c;
}

float row_error(const std::vector<float>& x, std::size_t first, std::size_t count, const Candidate& c, float amax) {
  float err = 0.0f;
  for (std::size_t i = 0; i < count; ++i) {
    const float v = x[first + i];
    const float val = e2m1_rn(v * c.scale) * c.code * amax / 1536.0f;
    err = err + std::fabs(val - v);
  }
  return err;
}

// TE's reference_nvfp4.py:513-521 order for a 16x16 block's row errors.
float te_tree(const float e[16]) {
  return (((e[0] + e[8]) + (e[4] + e[12])) + ((e[2] + e[10]) + (e[6] + e[14]))) +
         (((e[1] + e[9]) + (e[5] + e[13])) + ((e[3] + e[11]) + (e[7] + e[15])));
}

Oracle four_over_six(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, int block_rows) {
  const float amax = te_amax(x, 0, x.size());
  const float s_enc = encode_scale(amax, 256.0f), s_dec = 1.0f / s_enc;
  Oracle o;
  for (std::int64_t r0 = 0; r0 < rows; r0 += block_rows)
    for (std::int64_t c0 = 0; c0 < cols; c0 += 16) {
      const std::size_t width = static_cast<std::size_t>(std::min<std::int64_t>(16, cols - c0));
      const std::int64_t r1 = std::min<std::int64_t>(rows, r0 + block_rows);
      float block_amax = 0.0f;
      for (std::int64_t r = r0; r < r1; ++r) block_amax = std::fmax(block_amax, te_amax(x, r * cols + c0, width));
      const Candidate c4 = candidate(block_amax, s_enc, s_dec, amax, 1.5f), c6 = candidate(block_amax, s_enc, s_dec, amax, 1.0f);
      float e4[16] = {}, e6[16] = {};
      for (std::int64_t r = r0; r < r1; ++r) {
        e4[r - r0] = row_error(x, r * cols + c0, width, c4, amax);
        e6[r - r0] = row_error(x, r * cols + c0, width, c6, amax);
      }
      const float err4 = block_rows == 1 ? e4[0] : te_tree(e4), err6 = block_rows == 1 ? e6[0] : te_tree(e6);
      const Candidate& pick = err4 < err6 ? c4 : c6;
      ++(err4 < err6 ? o.map4 : o.map6);
      o.scale(pick.scale);
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::size_t k = 0; k < width; ++k) o.element(x[r * cols + c0 + k], pick.scale, pick.scale_inv);
    }
  return o;
}

// ---- Row-scaled NVFP4 ------------------------------------------------------------------------------

Oracle row_scaled(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  Oracle o;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float amax = te_amax(x, r * cols, cols);
    const float s_enc = encode_scale(amax, 448.0f), s_dec = 1.0f / s_enc;
    for (std::int64_t c0 = 0; c0 < cols; c0 += 16) {
      const std::size_t width = static_cast<std::size_t>(std::min<std::int64_t>(16, cols - c0));
      const float code = e4m3_rn(std::fmin(te_amax(x, r * cols + c0, width) * (s_enc * (1.0f / 6.0f)), FLT_MAX));
      const float scale = std::fmin(1.0f / (code * s_dec), FLT_MAX);
      const float scale_inv = code * amax * (1.0f / 2688.0f);
      o.scale(scale);
      for (std::size_t k = 0; k < width; ++k) o.element(x[r * cols + c0 + k], scale, scale_inv);
    }
  }
  return o;
}

// ---- Helpers ---------------------------------------------------------------------------------------

// x as the BF16 an engine reads, x itself rounded to it (what the oracles take).
std::vector<std::uint16_t> bf16_rounding(std::vector<float>& x) {
  const std::vector<std::uint16_t> bits = testing::bf16_of(x);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_float(bits[i]);
  return bits;
}

QuantStats run(const TensorView& view, RecipeKind kind, Operand operand, int threads = 2,
               CpuEngineOptions::Strategy strategy = CpuEngineOptions::Strategy::kAuto, const std::string& isa = "") {
  CpuEngineOptions options;
  options.threads = threads;
  options.strategy = strategy;
  options.isa = isa;
  auto engine = std::move(make_cpu_engine(options)).value();
  // tensor_current beside it: a per-tensor spec lets value counts run pass 1 (row amaxes from codes).
  const std::vector<RecipePlan> plans = {testing::fp4_plan(kind, operand),
                                         RecipePlan{default_recipe(RecipeKind::kTensorCurrent), CastFormat::kE4M3, operand, std::nullopt, std::nullopt,
                                                    GemmRole::kUnknown}};
  return analyze_recipes(*engine, view, plans).value().recipes[0].stats;
}

// Normal values with outliers, a zero block, a block far below the rest (subnormal UE4M3 block
// scales) and a NaN; BF16 values.
std::vector<float> trouble(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (float& v : x) v = normal(rng);
  for (std::size_t i = 0; i < x.size(); i += 53) x[i] *= 40.0f;
  for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 16); ++c) {
    x[static_cast<std::size_t>(c)] = 0.0f;                                  // row 0's first block: zeros
    if (rows > 1) x[static_cast<std::size_t>(cols + c)] *= 0x1p-14f;       // row 1's: tiny
  }
  if (rows > 2) x[static_cast<std::size_t>(2 * cols + 3)] = NAN;
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  return x;
}

// ---- Stochastic rounding, every draw (te_stochastic_rounding.h) -----------------------------------

// nvfp4's 1x16 block scales (scale_rules_test pins them), each finite element's mean over TE's draws.
struct SrOracle {
  long double underflow = 0, overflow = 0, saturated = 0, squared_error = 0, dot = 0;
  long double in_range_squares = 0, clipped_dot = 0;
};

SrOracle sr_oracle(const std::vector<float>& x, std::size_t cols) {
  const BlockRule rule = nvfp4_rule(te_amax(x, 0, x.size()));
  SrOracle o;
  for (std::size_t first = 0; first < x.size(); first += std::min<std::size_t>(16, cols - first % cols)) {
    const std::size_t width = std::min<std::size_t>(16, cols - first % cols);
    const ScalePair s = nvfp4_block_scale(rule, te_amax(x, first, width));
    for (std::size_t i = first; i < first + width; ++i) {
      const float v = x[i];
      if (!std::isfinite(v)) continue;
      const DrawMean m = te_draw_mean(v, s.scale, s.scale_inv);
      o.underflow += v != 0.0f ? m.zero / 256.0L : 0;
      o.overflow += m.clipped / 256.0L;
      o.saturated += m.saturated / 256.0L;
      o.squared_error += m.squared_error;
      o.dot += m.dot;
      const bool in_range = std::fabs(v * s.scale) <= 6.0f;
      o.in_range_squares += in_range ? static_cast<long double>(v) * v : 0;
      o.clipped_dot += in_range ? 0 : m.dot;
    }
  }
  return o;
}

}  // namespace

TEST_CASE("4over6 casts X per 1x16 block and W per 16x16 block as the oracle of TE's kernel", "[nvfp4_options]") {
  struct Case {
    std::int64_t rows, cols;
    Operand operand;
  };
  for (const Case& c : {Case{37, 40, Operand::kX}, Case{37, 40, Operand::kW}, Case{130, 4100, Operand::kX},
                        Case{64, 4112, Operand::kW}, Case{1, 16, Operand::kW}}) {
    std::vector<float> x = trouble(c.rows, c.cols, static_cast<std::uint32_t>(c.rows + c.cols));
    const std::vector<std::uint16_t> bits = bf16_rounding(x);
    const int block_rows = c.operand == Operand::kW ? 16 : 1;
    const Oracle want = four_over_six(x, c.rows, c.cols, block_rows);
    INFO(c.rows << "x" << c.cols << " block rows " << block_rows << ": map4 " << want.map4 << ", map6 " << want.map6);
    if (c.rows * c.cols > 256) {  // both candidates win somewhere
      CHECK(want.map4 > 0);
      CHECK(want.map6 > 0);
    }
    for (int threads : {1, 2})
      for (const std::string& isa : cpu_isas()) {  // every vector width this CPU runs
        INFO(threads << " threads, " << isa);
        check_same(run(TensorView{bits.data(), DType::kBF16, c.rows, c.cols, 1.0f}, RecipeKind::kNvfp4FourOverSix,
                       c.operand, threads, CpuEngineOptions::Strategy::kAuto, isa),
                   want);
      }
  }
}

TEST_CASE("4over6: a tie keeps map6, a strictly smaller error takes map4, a gradient stays nvfp4", "[nvfp4_options]") {
  // Tensor amax 6: S_enc = 1536 / 6 = 256, so a block of amax 6 has codes 256 (map6) and 384 (map4).
  // {6, 3, 1.5} are exact both ways (map4 casts them to 4, 2, 1): equal errors, map6's multiplier 1.
  std::vector<float> tie(16, 0.0f);
  tie[0] = 6.0f;
  tie[1] = 3.0f;
  tie[2] = 1.5f;
  auto engine = make_cpu_engine(1);
  auto stats = [&](std::vector<float>& x, RecipeKind kind, Operand op) {
    const std::vector<RecipePlan> plans = {testing::fp4_plan(kind, op)};
    return analyze_recipes(*engine, TensorView{x.data(), DType::kF32, 1, 16, 1.0f}, plans).value().recipes[0].stats;
  };
  CHECK(stats(tie, RecipeKind::kNvfp4FourOverSix, Operand::kX).scale_max == 1.0f);
  CHECK(stats(tie, RecipeKind::kNvfp4FourOverSix, Operand::kX).squared_error == 0.0);
  // {6, 5}: map6 rounds 5 to 4 (the tie goes to the even code), error 1; map4 casts 5 * 2/3 to 3,
  // which decodes to 4.5, error 0.5: map4, whose multiplier is 1 / 1.5.
  std::vector<float> win(16, 0.0f);
  win[0] = 6.0f;
  win[1] = 5.0f;
  const QuantStats w = stats(win, RecipeKind::kNvfp4FourOverSix, Operand::kX);
  CHECK(w.scale_max == 1.0f / 1.5f);
  CHECK(w.squared_error == 0.25);
  // Gradients never take 4over6 (pytorch/quantization.py:1702-1709): nvfp4's cast.
  const QuantStats dy = stats(win, RecipeKind::kNvfp4FourOverSix, Operand::kDy);
  const QuantStats plain = stats(win, RecipeKind::kNvfp4, Operand::kDy);
  CHECK(dy.squared_error == plain.squared_error);
  CHECK(dy.scale_max == plain.scale_max);
}

TEST_CASE("a 16x16 block's row errors add in TE's tree, not in row order", "[nvfp4_options]") {
  float v[16];
  // 1 + 2^-24 rounds back to 1 each time in row order; the tree first adds the small ones together.
  for (int i = 0; i < 16; ++i) v[i] = i == 0 ? 1.0f : 0x1p-24f;
  float sequential = 0.0f;
  for (float e : v) sequential += e;
  const float want = te_tree(v);
  REQUIRE(want != sequential);  // the orders differ on these values
  float copy[16];
  std::copy(std::begin(v), std::end(v), copy);
  CHECK(tree_sum16(copy) == want);
}

TEST_CASE("4over6 of a tensor holding Inf: S_enc 1, codes at 448, every sum non-finite as TE's", "[nvfp4_options]") {
  std::vector<float> x = trouble(16, 32, 5);
  x[40] = INFINITY;
  for (float& v : x) v = std::isnan(v) ? 0.0f : v;
  const Oracle want = four_over_six(x, 16, 32, 1);
  const QuantStats got = run(TensorView{x.data(), DType::kF32, 16, 32, 1.0f}, RecipeKind::kNvfp4FourOverSix, Operand::kX);
  CHECK(got.underflow == static_cast<double>(want.underflow));
  CHECK(got.scale_min == want.scale_min);
  CHECK(!std::isfinite(got.squared_error));
  CHECK(!std::isfinite(static_cast<double>(want.squared_error)));
}

TEST_CASE("what 4over6 buys on Gaussian data: a lower MSE than nvfp4's", "[nvfp4_options]") {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  std::vector<float> x(256 * 256);
  for (float& v : x) v = normal(rng);
  const TensorView view{x.data(), DType::kF32, 256, 256, 1.0f};
  for (Operand op : {Operand::kX, Operand::kW}) {
    const double four = run(view, RecipeKind::kNvfp4FourOverSix, op).squared_error;
    const double plain = run(view, RecipeKind::kNvfp4, op).squared_error;
    INFO("operand " << static_cast<int>(op) << ": 4over6 " << four << ", nvfp4 " << plain);
    CHECK(four < plain);
  }
}

TEST_CASE("stochastic rounding's expectation is the mean over all 256 draws of TE's rounder, clips included",
          "[nvfp4_options]") {
  std::vector<float> ys = {0.0f, 0.3f, -0.25f, 1.75f, 2.5f, 3.99f, 4.0f, 5.0f, -5.5f, 6.0f, 6.5f, 7.99f, 8.0f,
                           -9.0f, 1e30f, 0x1p-20f, std::nextafter(6.0f, 7.0f), std::nextafter(8.0f, 0.0f)};
  // Every 1/256 of a step in each interval of the grid (extended by 8 past max), and the floats
  // either side: where floor(256 p) changes, and where fp32's rounding of |y| + u step lifts a draw.
  const float points[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f};
  for (int g = 0; g + 1 < 9; ++g)
    for (int j = 0; j < 256; ++j) {
      const float y = points[g] + (points[g + 1] - points[g]) * static_cast<float>(j) / 256.0f;
      for (float v : {y, std::nextafter(y, 0.0f), std::nextafter(y, 10.0f)}) ys.push_back(v);
    }
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> wide(-9.5f, 9.5f);
  for (int i = 0; i < 2000; ++i) ys.push_back(wide(rng));
  int lifted = 0;  // draws fp32's rounding carries onto the next point, found below
  for (float y : ys) {
    const DrawMean want = te_draw_mean(y, 1.0f, 1.0f);
    const ExpectedElement<float> e = stochastic_element<kE2M1>(y, 1.0f, 1.0f);
    const long double p = e.p_high;
    const long double mean = (1 - p) * e.low + p * e.high;
    const long double mse = (1 - p) * (y - e.low) * (y - e.low) + p * (y - e.high) * (y - e.high);
    INFO("y = " << y);
    CHECK(mean == Approx(static_cast<double>(want.mean)).margin(1e-15));
    CHECK(mse == Approx(static_cast<double>(want.squared_error)).margin(1e-15));
    CHECK(e.p_overflow * 256.0f == static_cast<float>(want.clipped));
    CHECK(e.p_saturated * 256.0f == static_cast<float>(want.saturated));
    if (y != 0.0f) CHECK((e.low_zero ? (1.0f - e.p_high) * 256.0f : 0.0f) == static_cast<float>(want.zero));
    const float a = std::fabs(y), step = a >= 4.0f ? 2.0f : (a >= 2.0f ? 1.0f : 0.5f);
    if (a < 6.0f && std::floor((a - std::floor(a / step) * step) / step * 256.0f) < e.p_high * 256.0f) ++lifted;
  }
  CHECK(lifted > 0);  // the crafted values reach the fp32 carry
}

TEST_CASE("TE's rounder leans toward zero by up to 1/256 of a step, and clips between 6 and 8 only when the draw "
          "lands on 8",
          "[nvfp4_options]") {
  // A value a 1/512 step above a grid point never rounds up: 256 p = 0.5 floors to 0.
  const ExpectedElement<float> e = stochastic_element<kE2M1>(4.0f + 2.0f / 512.0f, 1.0f, 1.0f);
  CHECK(e.p_high == 0.0f);
  CHECK(e.low == 4.0f);
  // 7 is halfway from 6 to 8: half the draws reach 8 and are clipped, the code is 6 every time.
  const ExpectedElement<float> seven = stochastic_element<kE2M1>(7.0f, 1.0f, 1.0f);
  CHECK(seven.p_overflow == 0.5f);
  CHECK(seven.p_saturated == 1.0f);
  CHECK(seven.low == 6.0f);
  CHECK(seven.high == 6.0f);
  CHECK(stochastic_element<kE2M1>(8.0f, 1.0f, 1.0f).p_overflow == 1.0f);
  CHECK(stochastic_element<kE2M1>(6.0f, 1.0f, 1.0f).p_overflow == 0.0f);
}

TEST_CASE("with a non-finite dequantization factor, the saturation share is the codes' own", "[nvfp4_options]") {
  for (float scale_inv : {INFINITY, FLT_MAX}) {
    for (float y : {4.5f, 5.0f, 5.75f, 3.0f}) {
      const DrawMean want = te_draw_mean(y, 1.0f, scale_inv);
      const ExpectedElement<float> e = stochastic_element<kE2M1>(y, 1.0f, scale_inv);
      INFO("y = " << y << ", scale_inv = " << scale_inv);
      CHECK(e.p_saturated * 256.0f == static_cast<float>(want.saturated));
      CHECK(e.p_saturated < 1.0f);
    }
  }
  // Through the engine: one Inf in the tensor makes the global amax, and so every block's factor, Inf.
  std::vector<float> x = trouble(16, 32, 5);
  for (float& v : x) v = std::isnan(v) ? 0.0f : v;
  x[40] = INFINITY;
  const SrOracle want = sr_oracle(x, 32);
  const QuantStats got = run(TensorView{x.data(), DType::kF32, 16, 32, 1.0f}, RecipeKind::kNvfp4Sr, Operand::kDy);
  CHECK(got.saturated == Approx(static_cast<double>(want.saturated)).epsilon(1e-12));
  CHECK(got.underflow == Approx(static_cast<double>(want.underflow)).epsilon(1e-12));
  CHECK(got.overflow == Approx(static_cast<double>(want.overflow)).epsilon(1e-12));
}

TEST_CASE("nvfp4_sr reports a gradient's expected statistics as the mean over TE's draws, and X and W round to "
          "nearest",
          "[nvfp4_options]") {
  std::vector<float> x = trouble(37, 40, 17);
  const std::vector<std::uint16_t> bits = bf16_rounding(x);
  const TensorView view{bits.data(), DType::kBF16, 37, 40, 1.0f};
  const SrOracle want = sr_oracle(x, 40);
  REQUIRE(want.overflow != std::floor(want.overflow));  // the data reaches between 6 and 8
  for (const std::string& isa : cpu_isas()) {
    INFO(isa);
    const QuantStats q = run(view, RecipeKind::kNvfp4Sr, Operand::kDy, 2, CpuEngineOptions::Strategy::kAuto, isa);
    CHECK(q.underflow == Approx(static_cast<double>(want.underflow)).epsilon(1e-12));
    CHECK(q.overflow == Approx(static_cast<double>(want.overflow)).epsilon(1e-12));
    CHECK(q.squared_error == Approx(static_cast<double>(want.squared_error)).epsilon(1e-12));
  }
  const QuantStats got = run(view, RecipeKind::kNvfp4Sr, Operand::kDy);
  CHECK(got.underflow == Approx(static_cast<double>(want.underflow)).epsilon(1e-12));
  CHECK(got.underflow != std::floor(got.underflow));  // an expected count
  CHECK(got.overflow == Approx(static_cast<double>(want.overflow)).epsilon(1e-12));
  CHECK(got.saturated == Approx(static_cast<double>(want.saturated)).epsilon(1e-12));
  CHECK(got.squared_error == Approx(static_cast<double>(want.squared_error)).epsilon(1e-12));
  CHECK(got.dot == Approx(static_cast<double>(want.dot)).epsilon(1e-12));
  // The rounder leans toward zero: E[x * x̂] falls short of x² inside the range (up to fp32's x̂).
  CHECK(got.dot < static_cast<double>(want.in_range_squares + want.clipped_dot));
  // Its expected error is larger than nearest rounding's; X and W are nvfp4's.
  CHECK(got.squared_error > run(view, RecipeKind::kNvfp4, Operand::kDy).squared_error);
  CHECK(run(view, RecipeKind::kNvfp4Sr, Operand::kX).squared_error == run(view, RecipeKind::kNvfp4, Operand::kX).squared_error);
}

TEST_CASE("nvfp4_row scales each row of X by its own amax, as the oracle of TE's row-scaled cast", "[nvfp4_options]") {
  struct Case {
    std::int64_t rows, cols;
  };
  // 3 x 5000: each row spans two 4096-column segments, its amax planted in the second; 130 x 4100:
  // rows split over tasks.
  for (const Case& c : {Case{37, 40}, Case{3, 5000}, Case{130, 4100}}) {
    std::vector<float> x = trouble(c.rows, c.cols, 29);
    for (std::int64_t r = 0; r < c.rows; ++r) {
      // Rows a few binades apart, as tokens are; row 0 stays, and the last row is all zero.
      const float factor = r + 1 == c.rows ? 0.0f : std::ldexp(1.0f, -static_cast<int>(r % 9)) * (1.0f + 0.1f * (r % 5));
      for (std::int64_t k = 0; k < c.cols; ++k) x[static_cast<std::size_t>(r * c.cols + k)] *= factor;
      if (c.cols > 4096) x[static_cast<std::size_t>(r * c.cols + 4096 + (c.cols - 4096) / 2)] = 90.0f * factor;
    }
    const std::vector<std::uint16_t> bits = bf16_rounding(x);
    const Oracle want = row_scaled(x, c.rows, c.cols);
    for (auto strategy : {CpuEngineOptions::Strategy::kElementwise, CpuEngineOptions::Strategy::kValueCounts}) {
      for (const TensorView& view : {TensorView{bits.data(), DType::kBF16, c.rows, c.cols, 1.0f},
                                     TensorView{x.data(), DType::kF32, c.rows, c.cols, 1.0f}}) {
        INFO(c.rows << "x" << c.cols << " " << dtype_name(view.dtype) << " strategy " << static_cast<int>(strategy));
        check_same(run(view, RecipeKind::kNvfp4Row, Operand::kX, 2, strategy), want);
      }
    }
  }
}

TEST_CASE("what row scaling buys: rows far below the tensor's amax keep their values", "[nvfp4_options]") {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  const std::int64_t rows = 64, cols = 256;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < cols; ++k) x[static_cast<std::size_t>(r * cols + k)] = normal(rng) * std::ldexp(1.0f, -static_cast<int>(r / 4));
  const TensorView view{x.data(), DType::kF32, rows, cols, 1.0f};
  const QuantStats row = run(view, RecipeKind::kNvfp4Row, Operand::kX), plain = run(view, RecipeKind::kNvfp4, Operand::kX);
  INFO("underflow: row-scaled " << row.underflow << ", nvfp4 " << plain.underflow);
  CHECK(row.underflow < plain.underflow);
  // W is not row-scaled (pytorch/quantization.py:1738-1742): nvfp4's 16x16 cast.
  CHECK(run(view, RecipeKind::kNvfp4Row, Operand::kW).squared_error == run(view, RecipeKind::kNvfp4, Operand::kW).squared_error);
}
