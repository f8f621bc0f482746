// A job's own cast held against its high-precision input: the model of TE's cast (model_cast)
// writes what the scalar reference quantization writes, element by element, for every rule; the
// run's own statistics of a cast equal the reference's when the job cast as the model does; the
// code check counts exactly the elements (and blocks) a job cast differently; and the job's codes
// are read back K-major from the scale layouts as the GEMM reads them.
#include "fp8scope/kernels/cast_check.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/scale_rules.h"
#include "reference_analysis.h"
#include "support/cublas_scale_layouts.h"
#include "tensor_generators.h"

using namespace fp8scope;
namespace doc = fp8scope::testing::cublas_layout;

namespace {

struct Case {
  const char* name;
  QuantSpec spec;
};

QuantSpec spec_of(RecipeKind kind, Operand operand, std::optional<float> fixed = std::nullopt) {
  const Recipe r = default_recipe(kind);
  Result<QuantSpec> s = quant_spec_for(r, r.format_for(operand), operand, fixed);
  REQUIRE(s.ok());
  return s.value();
}

std::vector<Case> cases() {
  std::vector<Case> c = {
      {"tensor_delayed fixed scale", spec_of(RecipeKind::kTensorDelayed, Operand::kX, 3.5f)},
      {"tensor_current e5m2", spec_of(RecipeKind::kTensorCurrent, Operand::kDy)},
      {"mxfp8", spec_of(RecipeKind::kMxfp8, Operand::kX)},
      {"block_1x128", spec_of(RecipeKind::kBlock1x128, Operand::kX)},
      {"block_128x128", spec_of(RecipeKind::kBlock128x128, Operand::kW)},
      {"nvfp4 1x16", spec_of(RecipeKind::kNvfp4, Operand::kX)},
      {"nvfp4 16x16", spec_of(RecipeKind::kNvfp4, Operand::kW)},
      {"nvfp4 4over6", spec_of(RecipeKind::kNvfp4FourOverSix, Operand::kX)},
      {"nvfp4 row-scaled", spec_of(RecipeKind::kNvfp4Row, Operand::kX)},
  };
  QuantSpec given_amax = spec_of(RecipeKind::kNvfp4, Operand::kX);
  given_amax.tensor_amax = 123.0f;  // an all-reduced amax, larger than this rank's
  c.push_back({"nvfp4 under a given amax", given_amax});
  return c;
}

// Equal to 12 digits, or both NaN (an Inf element's block under NVFP4 decodes to NaN).
bool same(double got, double want) {
  return (std::isnan(got) && std::isnan(want)) || got == Approx(want).epsilon(1e-12);
}

TensorView view_of(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  return {x.data(), DType::kF32, rows, cols, 1.0f};
}

QuantStats engine_stats(const TensorView& t, const QuantSpec& spec) {
  static const std::unique_ptr<StatsEngine> engine = make_cpu_engine(1);
  TensorAnalysis a;
  REQUIRE(engine->analyze(t, std::span<const QuantSpec>(&spec, 1), &a).ok());
  return a.quant[0];
}

}  // namespace

TEST_CASE("the run's own statistics of a cast the job made as the model does are the reference's") {
  const std::int64_t rows = 48, cols = 256;
  for (const Case& c : cases()) {
    for (auto d : {testing::Distribution::kNormal, testing::Distribution::kOutlierChannels, testing::Distribution::kTiny,
                   testing::Distribution::kWithNonFinite}) {
      if (c.spec.row_scaled && d == testing::Distribution::kWithNonFinite) continue;  // TE refuses NaN rows there
      CAPTURE(c.name, testing::distribution_name(d));
      const std::vector<float> x = testing::generate(d, rows, cols, 7);
      const TensorView t = view_of(x, rows, cols);
      const std::optional<CastElements> job = model_cast(t, c.spec);
      REQUIRE(job);
      const CastCheck check = check_cast(t, *job, c.spec, engine_stats(t, c.spec));
      CHECK(check.stats.code_mismatches == 0);
      CHECK(check.stats.codes_compared == static_cast<std::uint64_t>(rows * cols));
      if (c.spec.row_scaled || c.spec.rule == ScaleRule::kBlockNvfp4FourOverSix) continue;  // the reference has no such rule
      const reference::Quant want =
          reference::quantize(x, rows, cols, c.spec, reference::te_amax_of(x, rows, cols, 0, rows, 0, cols));
      CHECK(check.stats.underflow == static_cast<double>(want.underflow));
      CHECK(check.stats.saturated == static_cast<double>(want.saturated));
      CHECK(check.stats.overflow == static_cast<double>(want.overflow));
      CHECK(same(check.stats.squared_error, static_cast<double>(want.squared_error)));
      CHECK(same(check.stats.dot, static_cast<double>(want.dot)));
      CHECK(same(check.stats.dequant_squares, static_cast<double>(want.dequant_squares)));
    }
  }
}

TEST_CASE("the run's own error of a cast is measured from the job's codes, not from the model's") {
  const std::int64_t rows = 16, cols = 128;
  const std::vector<float> x = testing::generate(testing::Distribution::kNormal, rows, cols, 3);
  const TensorView t = view_of(x, rows, cols);
  const QuantSpec spec = spec_of(RecipeKind::kTensorDelayed, Operand::kX, 16.0f);
  CastElements job = *model_cast(t, spec);
  // A job that flushed its 10 smallest nonzero elements: 10 underflows more, each its x² of error.
  std::vector<std::size_t> order(x.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return std::fabs(x[a]) < std::fabs(x[b]); });
  const CastCheck clean = check_cast(t, job, spec, engine_stats(t, spec));
  double added = 0;
  int flushed = 0;
  for (std::size_t k = 0; flushed < 10; ++k) {
    const std::size_t i = order[k];
    if (x[i] == 0.0f || (job.codes[i] & 0x7F) == 0) continue;
    const double v = decode<kE4M3>(job.codes[i]) * (1.0 / 16.0);
    added += static_cast<double>(x[i]) * x[i] - (x[i] - v) * (x[i] - v);
    job.codes[i] = 0;
    ++flushed;
  }
  const CastCheck flushed_check = check_cast(t, job, spec, engine_stats(t, spec));
  CHECK(flushed_check.stats.underflow == clean.stats.underflow + 10);
  CHECK(flushed_check.stats.squared_error == Approx(clean.stats.squared_error + added).epsilon(1e-12));
  CHECK(flushed_check.stats.code_mismatches == 10);
}

TEST_CASE("the code check counts each element the job cast differently, and a block scale's elements") {
  const std::int64_t rows = 32, cols = 64;
  const std::vector<float> x = testing::generate(testing::Distribution::kNormal, rows, cols, 11);
  const TensorView t = view_of(x, rows, cols);
  SECTION("mxfp8") {
    const QuantSpec spec = spec_of(RecipeKind::kMxfp8, Operand::kX);
    CastElements job = *model_cast(t, spec);
    job.codes[5] ^= 1;
    job.codes[700] ^= 0x10;
    CHECK(check_cast(t, job, spec, engine_stats(t, spec)).stats.code_mismatches == 2);
    for (int k = 32; k < 64; ++k) job.stored_scales[static_cast<std::size_t>(k)] *= 2.0f;  // row 0's second block
    CHECK(check_cast(t, job, spec, engine_stats(t, spec)).stats.code_mismatches == 34);
  }
  SECTION("nvfp4 under the job's amax: the model must use it") {
    QuantSpec spec = spec_of(RecipeKind::kNvfp4, Operand::kX);
    spec.tensor_amax = 40.0f;
    const CastElements job = *model_cast(t, spec);
    CHECK(check_cast(t, job, spec, engine_stats(t, spec)).stats.code_mismatches == 0);
    QuantSpec own = spec;
    own.tensor_amax = std::nanf("");  // the model from this tensor's own amax: another cast
    CHECK(check_cast(t, job, own, engine_stats(t, own)).stats.code_mismatches > 0);
  }
  SECTION("stochastic rounding: statistics, and no check") {
    const QuantSpec spec = spec_of(RecipeKind::kNvfp4Sr, Operand::kDy);
    REQUIRE(spec.stochastic);
    QuantSpec nearest = spec;
    nearest.stochastic = false;
    const CastElements job = *model_cast(t, nearest);  // one draw, as a job would write it
    const CastCheck c = check_cast(t, job, spec, engine_stats(t, spec));
    CHECK(c.stats.codes_compared == 0);
    CHECK(c.stats.squared_error > 0);
    CHECK(!model_cast(t, spec));
  }
}

TEST_CASE("a job's codes are read K-major from the scale layout the GEMM reads") {
  // MXFP8 codes stored rows x cols with K along the stored rows (a column-wise copy TE does not
  // transpose): blocks of 32 rows share a scale; K-major, element (c, r) is stored (r, c).
  const std::int64_t rows = 64, cols = 48;  // K = 64, MN = 48
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> code(0, 0x7E), exponent(110, 135);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols));
  for (auto& c : codes) c = static_cast<std::uint8_t>(code(rng));
  const std::int64_t k_blocks = rows / 32;
  std::vector<std::uint8_t> compact(static_cast<std::size_t>(cols * k_blocks));
  for (auto& e : compact) e = static_cast<std::uint8_t>(exponent(rng));
  const std::vector<std::uint8_t> tiled = doc::tile_128x4(compact, cols, k_blocks);
  ObservedTensor t;
  t.codes = codes.data();
  t.dtype = DType::kE4M3;
  t.shape = {rows, cols, true};
  t.layout = ScaleLayout::kVec32Ue8m0;
  t.scales = tiled;
  Result<CastElements> got = observed_elements(t);
  REQUIRE(got.ok());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(c * rows + r);
      REQUIRE(got.value().codes[i] == codes[static_cast<std::size_t>(r * cols + c)]);
      REQUIRE(got.value().stored_scales[i] == decode_e8m0(compact[static_cast<std::size_t>(c * k_blocks + r / 32)]));
    }
  }
}
