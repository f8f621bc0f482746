// nvfp4_rht against an oracle written from Transformer Engine's source (d0067d0), in fp64:
// - the transform is diag(signs) @ H16 / 4 with TE's fixed signs (pytorch/tensor/nvfp4_tensor.py:
//   55-57, 62-103) and Sylvester's H16, entry (r, c) = (-1)^popcount(r & c)
//   (common/hadamard_transform/hadamard_transform_utils.cuh:21, 148), applied to x.t() in groups
//   of 16 consecutive elements, i.e. 16 rows of x (pytorch/custom_recipes/reference_nvfp4.py:443-446);
// - only the column-wise copies of activations and gradients are transformed, weights never
//   (common/recipe/__init__.py:593-609), and the NVFP4 amax is the transformed tensor's
//   (pytorch/quantization.py:1734-1735);
// - the matrix is BF16 ±0.25 (hadamard_transform_utils.cuh:161), so each product is exact, summed
//   in an fp32 accumulator and rounded to BF16 (cvt.rn.bf16x2.f32, :97-109): the oracle sums in
//   fp64 (exact here), rounds to fp32, then to BF16.
// The NVFP4 cast of the transformed copy is then the nvfp4 1x16 rule the other tests pin.
#include <catch2/catch.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <random>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/hadamard_transform.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "fp4_recipe_cases.h"
#include "reference_analysis.h"
#include "te_stochastic_rounding.h"

using namespace fp8scope;
using fp8scope::testing::bf16_of;

namespace {

// TE's matrix, entry (i, j): signs[i] * (-1)^popcount(i & j) / 4.
double te_rht(int i, int j) {
  const int signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  return signs[i] * (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) / 4.0;
}

// fp64 transform of x (rows x cols, row-major) into cols x ceil16(rows), BF16 values as floats;
// the exact values before that rounding into *exact, when given.
std::vector<float> oracle_transform(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                                    std::int64_t* padded, std::vector<double>* exact = nullptr) {
  *padded = (rows + 15) / 16 * 16;
  std::vector<float> t(static_cast<std::size_t>(cols * *padded));
  if (exact != nullptr) exact->assign(t.size(), 0.0);
  for (std::int64_t k = 0; k < cols; ++k)
    for (std::int64_t g = 0; g < *padded; g += 16)
      for (int j = 0; j < 16; ++j) {
        double y = 0;
        for (int i = 0; i < 16; ++i) {
          if (g + i < rows) y += te_rht(i, j) * x[static_cast<std::size_t>((g + i) * cols + k)];
        }
        t[static_cast<std::size_t>(k * *padded + g + j)] = bf16_to_float(float_to_bf16(static_cast<float>(y)));
        if (exact != nullptr) (*exact)[static_cast<std::size_t>(k * *padded + g + j)] = y;
      }
  return t;
}


}  // namespace

TEST_CASE("the transform of a unit impulse is TE's matrix row, signs and orientation included", "[nvfp4_rht]") {
  // x = I (16 x 16): column k of x is e_k, so row k of the transform is row k of diag(s) H / 4.
  std::vector<float> eye(256, 0.0f);
  for (int i = 0; i < 16; ++i) eye[static_cast<std::size_t>(i * 16 + i)] = 1.0f;
  const std::vector<std::uint16_t> bits = bf16_of(eye);
  const HadamardTransformed t = hadamard_columns(TensorView{bits.data(), DType::kBF16, 16, 16, 1.0f});
  REQUIRE(t.columns == 16);
  REQUIRE(t.padded_rows == 16);
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < 16; ++j) {
      INFO(k << "," << j);
      CHECK(bf16_to_float(t.bf16[t.index(k, j)]) == te_rht(k, j));
    }
  // Orthonormal: (diag(s) H / 4) (diag(s) H / 4)^T = I.
  for (int a = 0; a < 16; ++a)
    for (int b = 0; b < 16; ++b) {
      double dot = 0;
      for (int j = 0; j < 16; ++j) dot += te_rht(a, j) * te_rht(b, j);
      CHECK(dot == (a == b ? 1.0 : 0.0));
    }
}

TEST_CASE("random BF16 and F32 tensors of 37 rows (zeros pad the last group) transform as the fp64 oracle does",
          "[nvfp4_rht]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const std::int64_t rows = 37, cols = 70;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (float& v : x) v = bf16_to_float(float_to_bf16(normal(rng)));
  std::int64_t padded = 0;
  const std::vector<float> want = oracle_transform(x, rows, cols, &padded);
  const std::vector<std::uint16_t> bits = bf16_of(x);
  for (const TensorView& view : {TensorView{bits.data(), DType::kBF16, rows, cols, 1.0f},
                                 TensorView{x.data(), DType::kF32, rows, cols, 1.0f}}) {
    const HadamardTransformed t = hadamard_columns(view);
    REQUIRE(t.columns == cols);
    REQUIRE(t.padded_rows == padded);
    REQUIRE(padded == 48);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const auto k = static_cast<std::int64_t>(i) / padded, r = static_cast<std::int64_t>(i) % padded;
      INFO(k << "," << r);
      CHECK(bf16_to_float(t.bf16[t.index(k, r)]) == want[i]);
    }
  }
}

// The transform of ±m with random signs, and its exactness against the oracle; counts of finite
// and infinite outputs.
struct LargeTransform {
  std::vector<std::uint16_t> bits;
  std::size_t finite = 0, infinite = 0;
};

LargeTransform transform_of_large(float m, std::int64_t rows, std::int64_t cols) {
  std::mt19937 rng(5);
  std::bernoulli_distribution coin;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (float& v : x) v = bf16_to_float(float_to_bf16(coin(rng) ? m : -m));
  std::int64_t padded = 0;
  const std::vector<float> want = oracle_transform(x, rows, cols, &padded);
  LargeTransform out{bf16_of(x)};
  const HadamardTransformed t = hadamard_columns(TensorView{out.bits.data(), DType::kBF16, rows, cols, 1.0f});
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i) / padded, r = static_cast<std::int64_t>(i) % padded;
    const float got = bf16_to_float(t.bf16[t.index(k, r)]);
    INFO(m << ": " << k << "," << r);
    CHECK(got == want[i]);
    (std::isfinite(got) ? out.finite : out.infinite) += 1;
  }
  return out;
}

TEST_CASE("BF16 inputs near FLT_MAX transform without overflow where the exact transform is finite", "[nvfp4_rht]") {
  // Quartering each input before any sum keeps every partial sum within the inputs' range. With
  // ±8e37 no output can pass 16 * 8e37 / 4 < FLT_MAX, where a butterfly of unquartered pairs
  // reaches 6.4e38 = Inf after three stages.
  const std::int64_t rows = 32, cols = 40;
  const LargeTransform near = transform_of_large(8e37f, rows, cols);
  CHECK(near.infinite == 0);
  CpuEngineOptions options;
  auto engine = std::move(make_cpu_engine(options)).value();
  const std::vector<RecipePlan> plans = {testing::fp4_plan(RecipeKind::kNvfp4Rht, Operand::kX)};
  const TensorView view{near.bits.data(), DType::kBF16, rows, cols, 1.0f};
  const QuantStats q = analyze_recipes(*engine, view, plans).value().recipes[0].stats;
  CHECK(q.overflow == 0.0);
  // With ±3e38 an output whose exact value is past BF16's range is Inf, as TE's MMA writes it, and
  // only those: most stay finite.
  const LargeTransform past = transform_of_large(3e38f, rows, cols);
  CHECK(past.infinite > 0);
  CHECK(past.finite > past.infinite);
}

TEST_CASE("nvfp4_rht casts X's and Dy's transform as nvfp4 1x16 and a weight as nvfp4 16x16", "[nvfp4_rht]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const std::int64_t rows = 64, cols = 48;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (float& v : x) v = normal(rng);
  // Sparse outliers, an all-zero group of rows and a NaN, which spreads over its group. (An Inf
  // would make TE's amax, and so every NVFP4 sum, non-finite.)
  for (std::size_t i = 0; i < x.size(); i += 97) x[i] *= 50.0f;
  for (std::int64_t r = 16; r < 32; ++r) x[static_cast<std::size_t>(r * cols + 5)] = 0.0f;
  x[static_cast<std::size_t>(40 * cols + 7)] = NAN;
  const std::vector<std::uint16_t> bits = bf16_of(x);
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  const TensorView view{bits.data(), DType::kBF16, rows, cols, 1.0f};
  auto engine = make_cpu_engine(2);
  for (Operand operand : {Operand::kX, Operand::kDy}) {
    const std::vector<RecipePlan> plans = {testing::fp4_plan(RecipeKind::kNvfp4Rht, operand)};
    const TensorReport r = analyze_recipes(*engine, view, plans).value();
    std::int64_t padded = 0;
    std::vector<double> exact;
    const std::vector<float> t = oracle_transform(x, rows, cols, &padded, &exact);
    float amax = 0;
    for (float v : t) amax = std::isnan(v) ? amax : std::max(amax, std::fabs(v));
    // The cast reads the BF16 copy; its error is measured against the exact transform.
    const reference::Quant want = reference::quantize(t, cols, padded, r.recipes[0].spec, amax, &exact);
    const QuantStats& got = r.recipes[0].stats;
    CHECK(r.recipes[0].spec.block_rows == 1);
    CHECK(r.recipes[0].spec.block_cols == 16);
    CHECK(got.underflow == want.underflow);
    CHECK(got.overflow == want.overflow);
    CHECK(got.saturated == want.saturated);
    CHECK(got.scale_min == want.scale_min);
    CHECK(got.scale_max == want.scale_max);
    CHECK(static_cast<long double>(got.squared_error) == Approx(static_cast<double>(want.squared_error)).epsilon(1e-12));
    CHECK(static_cast<long double>(got.dot) == Approx(static_cast<double>(want.dot)).epsilon(1e-12));
    // The report's moments stay the original tensor's.
    CHECK(r.moments.nan == 1);
    CHECK(got.underflow > 0);
  }
  // Weights are never transformed: nvfp4_rht is nvfp4's 16x16 cast.
  const std::vector<RecipePlan> weights = {testing::fp4_plan(RecipeKind::kNvfp4Rht, Operand::kW),
                                           testing::fp4_plan(RecipeKind::kNvfp4, Operand::kW)};
  const TensorReport w = analyze_recipes(*engine, view, weights).value();
  CHECK(w.recipes[0].spec.block_rows == 16);
  CHECK(w.recipes[0].stats.squared_error == w.recipes[1].stats.squared_error);
  CHECK(w.recipes[0].stats.underflow == w.recipes[1].stats.underflow);
}

TEST_CASE("MSE, cosine and SQNR of nvfp4_rht all measure against the input, whose transform BF16 rounds",
          "[nvfp4_rht]") {
  // The transform is orthonormal, so against the exact transform sum (T - q)^2 = sum x^2 - 2 sum Tq +
  // sum q^2 holds with sum x^2 the input's own: the error and the signal the cosine and SQNR divide
  // by are the same tensor's. Measured against the BF16 copy instead, the two disagree whenever the
  // transform is not BF16-exact: sums of 16 quartered BF16 values mostly are not.
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> wide(32 * 24);
  for (float& v : wide) v = normal(rng);
  struct Case {
    std::vector<float> x;
    std::int64_t rows, cols;
  };
  auto engine = make_cpu_engine(2);
  for (const Case& c : {Case{{1.2345678f}, 1, 1}, Case{{3.0f}, 1, 1}, Case{wide, 32, 24}}) {
    const std::vector<std::uint16_t> bits = bf16_of(c.x);
    const TensorView view{bits.data(), DType::kBF16, c.rows, c.cols, 1.0f};
    const std::vector<RecipePlan> plans = {testing::fp4_plan(RecipeKind::kNvfp4Rht, Operand::kX)};
    const TensorReport r = analyze_recipes(*engine, view, plans).value();
    const QuantStats& q = r.recipes[0].stats;
    long double squares = 0;
    for (std::uint16_t b : bits) squares += static_cast<long double>(bf16_to_float(b)) * bf16_to_float(b);
    INFO(c.rows << "x" << c.cols);
    CHECK(q.squared_error == Approx(static_cast<double>(squares - 2 * static_cast<long double>(q.dot) + q.dequant_squares))
                                 .epsilon(1e-9)
                                 .margin(1e-12));
  }
}

// The fp64 oracle of TE's default NVFP4BlockScaling() on Dy's column-wise copy, wgrad's operand:
// the transform (oracle_transform), nvfp4's 1x16 scales of the BF16 copy, and each element's mean
// over all 256 draws of TE's stochastic rounding, measured against the exact transform.
struct ExpectedQuant {
  long double underflow = 0, overflow = 0, saturated = 0, squared_error = 0, dot = 0;
};

ExpectedQuant te_default_dy_wgrad(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                                  const QuantSpec& spec) {
  std::int64_t padded = 0;
  std::vector<double> exact;
  const std::vector<float> t = oracle_transform(x, rows, cols, &padded, &exact);
  float amax = 0;
  for (float v : t) amax = std::isnan(v) ? amax : std::max(amax, std::fabs(v));
  ExpectedQuant q;
  for (std::int64_t k = 0; k < cols; ++k)
    for (std::int64_t r0 = 0; r0 < padded; r0 += 16) {
      const std::size_t first = static_cast<std::size_t>(k * padded + r0);
      float block_amax = 0;
      for (std::size_t i = first; i < first + 16; ++i) block_amax = std::isnan(t[i]) ? block_amax : std::max(block_amax, std::fabs(t[i]));
      const ScalePair s = reference::scales_from_amax(spec, block_amax, amax);
      for (std::size_t i = first; i < first + 16; ++i) {
        if (!std::isfinite(t[i])) continue;
        const testing::DrawMean m = testing::te_draw_mean(t[i], s.scale, s.scale_inv, exact[i]);
        q.underflow += t[i] != 0.0f ? m.zero / 256.0L : 0;
        q.overflow += m.clipped / 256.0L;
        q.saturated += m.saturated / 256.0L;
        q.squared_error += m.squared_error;
        q.dot += m.dot;
      }
    }
  return q;
}

TEST_CASE("nvfp4_te is TE's default NVFP4BlockScaling per GEMM: each operand's copy as the GEMM reads it",
          "[nvfp4_rht]") {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  const std::int64_t rows = 37, cols = 40;  // rows past a multiple of 16 are zero padded
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (float& v : x) v = normal(rng);
  for (std::size_t i = 0; i < x.size(); i += 61) x[i] *= 30.0f;
  const std::vector<std::uint16_t> bits = bf16_of(x);
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  const TensorView view{bits.data(), DType::kBF16, rows, cols, 1.0f};
  auto engine = make_cpu_engine(2);
  auto stats = [&](RecipeKind kind, Operand op, GemmRole gemm) {
    RecipePlan p = testing::fp4_plan(kind, op);
    p.gemm = gemm;
    const std::vector<RecipePlan> plans = {p};
    return analyze_recipes(*engine, view, plans).value().recipes[0];
  };
  auto same = [](const QuantStats& a, const QuantStats& b) {
    CHECK(a.underflow == b.underflow);
    CHECK(a.overflow == b.overflow);
    CHECK(a.saturated == b.saturated);
    CHECK(a.squared_error == b.squared_error);
    CHECK(a.dot == b.dot);
    CHECK(a.scale_min == b.scale_min);
  };
  // fprop and dgrad read the row-wise copies: X as nvfp4, Dy stochastically rounded, W 16x16.
  same(stats(RecipeKind::kNvfp4Te, Operand::kX, GemmRole::kFprop).stats, stats(RecipeKind::kNvfp4, Operand::kX, GemmRole::kFprop).stats);
  same(stats(RecipeKind::kNvfp4Te, Operand::kDy, GemmRole::kDgrad).stats, stats(RecipeKind::kNvfp4Sr, Operand::kDy, GemmRole::kDgrad).stats);
  same(stats(RecipeKind::kNvfp4Te, Operand::kW, GemmRole::kFprop).stats, stats(RecipeKind::kNvfp4, Operand::kW, GemmRole::kFprop).stats);
  same(stats(RecipeKind::kNvfp4Te, Operand::kW, GemmRole::kDgrad).stats, stats(RecipeKind::kNvfp4, Operand::kW, GemmRole::kDgrad).stats);
  // A GEMM of unknown role reads the row-wise copy.
  same(stats(RecipeKind::kNvfp4Te, Operand::kX, GemmRole::kUnknown).stats, stats(RecipeKind::kNvfp4, Operand::kX, GemmRole::kFprop).stats);
  // wgrad reads the column-wise copies: X transformed (nvfp4_rht's), Dy transformed and
  // stochastically rounded, against the fp64 oracle of both.
  same(stats(RecipeKind::kNvfp4Te, Operand::kX, GemmRole::kWgrad).stats, stats(RecipeKind::kNvfp4Rht, Operand::kX, GemmRole::kWgrad).stats);
  const RecipeResult dy = stats(RecipeKind::kNvfp4Te, Operand::kDy, GemmRole::kWgrad);
  REQUIRE(dy.spec.stochastic);
  const ExpectedQuant want = te_default_dy_wgrad(x, rows, cols, dy.spec);
  CHECK(dy.stats.underflow == Approx(static_cast<double>(want.underflow)).epsilon(1e-12));
  CHECK(dy.stats.overflow == Approx(static_cast<double>(want.overflow)).epsilon(1e-12).margin(1e-12));
  CHECK(dy.stats.saturated == Approx(static_cast<double>(want.saturated)).epsilon(1e-12));
  CHECK(dy.stats.squared_error == Approx(static_cast<double>(want.squared_error)).epsilon(1e-12));
  CHECK(dy.stats.dot == Approx(static_cast<double>(want.dot)).epsilon(1e-12));
  CHECK(dy.stats.underflow != std::floor(dy.stats.underflow));  // expected counts
  // Neither option alone: the transform without rounding stochastically, nor the reverse.
  CHECK(dy.stats.squared_error != stats(RecipeKind::kNvfp4Rht, Operand::kDy, GemmRole::kWgrad).stats.squared_error);
  CHECK(dy.stats.squared_error != stats(RecipeKind::kNvfp4Sr, Operand::kDy, GemmRole::kWgrad).stats.squared_error);
}

TEST_CASE("what RHT buys: an iid Gaussian nothing, sparse outliers fewer flushed elements at a higher MSE",
          "[nvfp4_rht]") {
  // The transform of iid Gaussian data is iid Gaussian: the cast does as well, no better. Sparse
  // outliers (one element in 61, 8x) spread over their group: far fewer elements flush to zero,
  // but the spread outlier takes the block's range, so the squared error grows (measured: SQNR
  // 20.7 -> 20.1 dB, underflow 6727 -> 3948 elements).
  // Which wins is the tensor's: that is why it is a what-if.
  auto sqnr_and_underflow = [](float outlier) {
    std::mt19937 rng(9);
    std::normal_distribution<float> normal;
    std::vector<float> x(256 * 256);
    for (float& v : x) v = normal(rng);
    for (std::size_t i = 0; i < x.size(); i += 61) x[i] *= outlier;
    const std::vector<std::uint16_t> bits = bf16_of(x);
    auto engine = make_cpu_engine(2);
    const std::vector<RecipePlan> plans = {testing::fp4_plan(RecipeKind::kNvfp4, Operand::kX),
                                           testing::fp4_plan(RecipeKind::kNvfp4Rht, Operand::kX)};
    const TensorReport r = analyze_recipes(*engine, TensorView{bits.data(), DType::kBF16, 256, 256, 1.0f}, plans).value();
    std::array<double, 4> out{};
    for (int k = 0; k < 2; ++k) {
      out[k] = 10 * std::log10(r.moments.sum_squares / r.recipes[k].stats.squared_error);
      out[2 + k] = static_cast<double>(r.recipes[k].stats.underflow);
    }
    return out;
  };
  const auto gaussian = sqnr_and_underflow(1.0f);
  INFO("Gaussian: SQNR " << gaussian[0] << " / " << gaussian[1] << " dB, underflow " << gaussian[2] << " / " << gaussian[3]);
  CHECK(std::fabs(gaussian[0] - gaussian[1]) < 0.3);
  const auto outliers = sqnr_and_underflow(8.0f);
  INFO("outliers: SQNR " << outliers[0] << " / " << outliers[1] << " dB, underflow " << outliers[2] << " / " << outliers[3]);
  CHECK(outliers[3] < 0.7 * outliers[2]);
  CHECK(outliers[1] < outliers[0]);
}

TEST_CASE("more recipes than one engine call holds are split over calls, with the same results", "[nvfp4_rht]") {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> x(64 * 64);
  for (float& v : x) v = normal(rng);
  auto engine = make_cpu_engine(1);
  std::vector<RecipePlan> all;
  for (RecipeKind kind : kAllRecipeKinds) {
    RecipePlan p = testing::fp4_plan(kind, Operand::kW);
    p.recipe = default_recipe(kind);
    p.format = p.recipe.format_for(Operand::kW);
    all.push_back(p);
  }
  REQUIRE(all.size() > static_cast<std::size_t>(kMaxSpecsPerCall));
  const TensorView view{x.data(), DType::kF32, 64, 64, 1.0f};
  const TensorReport together = analyze_recipes(*engine, view, all).value();
  for (std::size_t k = 0; k < all.size(); ++k) {
    const TensorReport alone = analyze_recipes(*engine, view, std::span(&all[k], 1)).value();
    INFO(recipe_name(all[k].recipe.kind));
    CHECK(together.recipes[k].stats.squared_error == alone.recipes[0].stats.squared_error);
    CHECK(together.recipes[k].stats.underflow == alone.recipes[0].stats.underflow);
  }
}
