// The CPU engine against the element-by-element reference: counts and histograms exact, fp64 sums
// within 1e-12 of the long double reference (relative to the sum of magnitudes), across dtypes,
// distributions, odd shapes and every recipe, with one and several threads; the amax of every
// channel (column or row) exact.
#include "fp8scope/kernels/cpu_engine.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "reference_analysis.h"
#include "tensor_generators.h"

using namespace fp8scope;
using testing::Distribution;

namespace {

struct Shape {
  std::int64_t rows, cols;
};

// Every recipe (the FP4 ones cast to E2M1 whatever the FP8 format; NVFP4 and mxfp8_2d take a
// weight's 16x16 and 32x32 blocks in the E4M3 cases and a gradient's 1x16 and 1x32 in the E5M2
// ones): kMaxSpecsPerCall specs; and alone, delayed scaling at its steady state.
std::vector<QuantSpec> all_specs(CastFormat format) {
  std::vector<QuantSpec> specs;
  const Operand operand = format == CastFormat::kE4M3 ? Operand::kW : Operand::kDy;
  for (RecipeKind kind : kAllRecipeKinds) {
    // NVFP4's options have oracles of their own (nvfp4_rht_test, nvfp4_options_test); nvfp4_rht's
    // spec is nvfp4's, its transform happening before the engine.
    if (default_recipe(kind).nvfp4_option()) continue;
    const std::optional<float> fixed =
        kind == RecipeKind::kTensorDelayed ? std::optional<float>(3.5f) : std::nullopt;  // a stale delayed scale
    const Recipe recipe = default_recipe(kind);
    specs.push_back(quant_spec_for(recipe, recipe.fp4() ? CastFormat::kE2M1 : format, operand, fixed).value());
  }
  return specs;
}

std::vector<QuantSpec> steady_delayed_spec(CastFormat format) {
  Recipe steady = default_recipe(RecipeKind::kTensorDelayed);
  steady.margin = 2.0f;
  return {quant_spec_for(steady, format, Operand::kX, std::nullopt).value()};
}

void check_close(long double reference, double actual, long double magnitude, const char* what) {
  INFO(what << ": reference " << static_cast<double>(reference) << " actual " << actual);
  if (std::isnan(reference)) {  // NVFP4 of a tensor holding Inf: TE dequantizes with its Inf amax
    CHECK(std::isnan(actual));
    return;
  }
  if (std::isinf(reference)) {
    CHECK(static_cast<double>(reference) == actual);
    return;
  }
  CHECK(std::fabs(static_cast<long double>(actual) - reference) <= 1e-12L * magnitude + 1e-300L);
}

void check_against_reference(const TensorView& t, std::span<const QuantSpec> specs, const TensorAnalysis& a) {
  const std::vector<float> x = reference::load(t);
  const reference::Moments m = reference::moments(x);
  reference::check_exact_moments(a.moments, m);
  check_close(m.sum, a.moments.sum, m.sum_abs, "sum");
  check_close(m.sum_abs, a.moments.sum_abs, m.sum_abs, "sum_abs");
  check_close(m.sum_squares, a.moments.sum_squares, m.sum_squares, "sum_squares");
  check_close(m.m2, a.moments.m2, m.sum_squares + m.m2, "m2");
  // Σ(x - mean)⁴ to within 1e-12 of itself, even with the mean 10⁵ spreads away; |m3| is at most
  // sqrt(m2 m4) (Cauchy-Schwarz).
  check_close(m.m4, a.moments.m4, m.m4, "m4");
  check_close(m.m3, a.moments.m3, std::sqrt(m.m2 * m.m4), "m3");
  const float te_amax = m.inf ? INFINITY : m.amax;
  CHECK(a.te_amax == te_amax);
  CHECK(a.channel_amax == reference::channel_amax(x, t.rows, t.cols, t.channels));
  REQUIRE(a.quant.size() == specs.size());
  for (std::size_t k = 0; k < specs.size(); ++k) {
    INFO("spec " << k << " rule " << static_cast<int>(specs[k].rule) << " " << specs[k].block_rows << "x"
                  << specs[k].block_cols << " " << format_name(specs[k].format));
    const reference::Quant q = reference::quantize(x, t.rows, t.cols, specs[k], te_amax);
    const QuantStats& got = a.quant[k];
    CHECK(got.underflow == q.underflow);
    CHECK(got.overflow == q.overflow);
    CHECK(got.saturated == q.saturated);
    CHECK(got.scale_min == q.scale_min);
    CHECK(got.scale_max == q.scale_max);
    check_close(q.squared_error, got.squared_error, q.squared_error, "squared_error");
    check_close(q.dot, got.dot, q.dot_abs, "dot");
    check_close(q.dequant_squares, got.dequant_squares, q.dequant_squares, "dequant_squares");
    for (int b = 0; b < kHistogramBins; ++b) {
      INFO("histogram bin " << b);
      CHECK(got.histogram[b] == q.histogram[b]);
    }
  }
}

std::unique_ptr<StatsEngine> engine_with(int threads, const std::string& isa, CpuEngineOptions::Strategy strategy) {
  CpuEngineOptions options;
  options.threads = threads;
  options.isa = isa;
  options.strategy = strategy;
  return std::move(make_cpu_engine(options)).value();
}

void check_case(DType dtype, Distribution dist, Shape shape, CastFormat format, StatsEngine& engine) {
  const std::vector<float> values = testing::generate(dist, shape.rows, shape.cols, 42);
  const float scale_inv = dtype_is_codes(dtype) ? 0.125f : 1.0f;
  const std::vector<std::uint8_t> bytes = testing::to_bytes(values, dtype, scale_inv);
  TensorView t{bytes.data(), dtype, shape.rows, shape.cols, scale_inv};
  // Columns with the block specs, rows with a per-tensor one: a column's rows and a row's chunks
  // span tasks, by value counts too.
  const std::pair<std::vector<QuantSpec>, ChannelAxis> cases[] = {{all_specs(format), ChannelAxis::kColumns},
                                                                  {steady_delayed_spec(format), ChannelAxis::kRows}};
  for (const auto& [specs, channels] : cases) {
    t.channels = channels;
    TensorAnalysis a;
    REQUIRE(engine.analyze(t, specs, &a).ok());
    check_against_reference(t, specs, a);
  }
}

}  // namespace

TEST_CASE("CPU engine matches the reference, element by element and by value counts", "[cpu_engine]") {
  const DType dtype = GENERATE(DType::kF32, DType::kBF16, DType::kF16, DType::kE4M3, DType::kE2M1);
  const Distribution dist = GENERATE(Distribution::kNormal, Distribution::kHeavyTailed, Distribution::kOutlierChannels,
                                     Distribution::kTiny, Distribution::kAllZero, Distribution::kWithNonFinite);
  const Shape shape = GENERATE(Shape{1, 16}, Shape{5, 160}, Shape{217, 256}, Shape{130, 4100});
  const CastFormat format = GENERATE(CastFormat::kE4M3, CastFormat::kE5M2);
  const auto strategy = GENERATE(CpuEngineOptions::Strategy::kElementwise, CpuEngineOptions::Strategy::kValueCounts);
  DYNAMIC_SECTION(dtype_name(dtype) << " " << testing::distribution_name(dist) << " " << shape.rows << "x"
                                    << shape.cols << " " << format_name(format) << " strategy "
                                    << static_cast<int>(strategy)) {
    auto engine = engine_with(3, "", strategy);
    check_case(dtype, dist, shape, format, *engine);
  }
}

TEST_CASE("every ISA copy of the inner loops this CPU runs matches the reference", "[cpu_engine]") {
  const std::string isa = GENERATE(from_range(cpu_isas()));
  const Distribution dist = GENERATE(Distribution::kOutlierChannels, Distribution::kWithNonFinite, Distribution::kTiny);
  const Shape shape = GENERATE(Shape{3, 77}, Shape{130, 4100});
  DYNAMIC_SECTION(isa << " " << testing::distribution_name(dist) << " " << shape.rows << "x" << shape.cols) {
    auto engine = engine_with(2, isa, CpuEngineOptions::Strategy::kElementwise);
    check_case(DType::kBF16, dist, shape, CastFormat::kE4M3, *engine);
  }
}

TEST_CASE("a tensor whose mean dwarfs its spread gets its central moments from a second pass, to the reference",
          "[cpu_engine]") {
  // Power sums would cancel away every digit of Σ(x - mean)⁴ here; NaN and Inf must add nothing to
  // the second pass either.
  const std::string isa = GENERATE(from_range(cpu_isas()));
  std::vector<float> values = testing::generate(Distribution::kHeavyTailed, 33, 1000, 5);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1000.0f + 0.01f * values[i] * (i < 20000 ? 1.0f : -3.0f);
  values[7] = NAN;
  values[20001] = -INFINITY;
  const TensorView t{values.data(), DType::kF32, 33, 1000, 1.0f};
  const std::vector<QuantSpec> specs = steady_delayed_spec(CastFormat::kE4M3);
  TensorAnalysis a;
  REQUIRE(engine_with(2, isa, CpuEngineOptions::Strategy::kElementwise)->analyze(t, specs, &a).ok());
  DYNAMIC_SECTION(isa) { check_against_reference(t, specs, a); }
}

TEST_CASE("an unknown ISA is refused with the list of runnable ones", "[cpu_engine]") {
  CpuEngineOptions options;
  options.isa = "riscv";
  const auto engine = make_cpu_engine(options);
  REQUIRE(!engine.ok());
  CHECK(engine.message().find("expected an ISA this CPU runs (") != std::string::npos);
  CHECK(engine.message().find("baseline") != std::string::npos);
}

TEST_CASE("a large tensor is split across threads and units, and merges to the reference", "[cpu_engine]") {
  const std::vector<float> values = testing::generate(Distribution::kOutlierChannels, 300, 9000, 7);
  const TensorView t{values.data(), DType::kF32, 300, 9000, 1.0f};
  const std::vector<QuantSpec> specs = all_specs(CastFormat::kE4M3);
  TensorAnalysis one, many;
  REQUIRE(make_cpu_engine(1)->analyze(t, specs, &one).ok());
  REQUIRE(make_cpu_engine(4)->analyze(t, specs, &many).ok());
  check_against_reference(t, specs, many);
  for (std::size_t k = 0; k < specs.size(); ++k) CHECK(one.quant[k].underflow == many.quant[k].underflow);
}

TEST_CASE("with current scaling the amax element never counts as overflow", "[cpu_engine]") {
  // Search amax values where fp32(amax * fmax/amax) rounds above fmax: still no overflow.
  auto engine = make_cpu_engine(1);
  const QuantSpec spec =
      quant_spec_for(default_recipe(RecipeKind::kTensorCurrent), CastFormat::kE4M3, Operand::kX, {}).value();
  int above_max = 0;
  for (std::uint32_t i = 0; i < 20000; ++i) {
    const float amax = bits_float(0x3F800000u + i * 419u);
    const float s = current_scale(amax, 448.0f, false, 0.0f);
    above_max += amax * s > 448.0f;
    const float data[2] = {amax, -amax * 0.25f};
    TensorAnalysis a;
    REQUIRE(engine->analyze(TensorView{data, DType::kF32, 1, 2, 1.0f}, {&spec, 1}, &a).ok());
    REQUIRE(a.quant[0].overflow == 0);
  }
  CHECK(above_max > 0);  // the rounding case really occurred
}

TEST_CASE("bad requests are refused with a reason", "[cpu_engine]") {
  auto engine = make_cpu_engine(1);
  const float data[4] = {1, 2, 3, 4};
  TensorAnalysis a;
  const QuantSpec spec;
  CHECK(engine->analyze(TensorView{data, DType::kF32, 0, 4, 1.0f}, {&spec, 1}, &a).message() ==
        "expected a nonempty tensor, got 0 x 4 elements");
  CHECK(!engine->analyze(TensorView{nullptr, DType::kF32, 1, 4, 1.0f}, {&spec, 1}, &a).ok());
  QuantSpec bad_block;
  bad_block.rule = ScaleRule::kBlockCurrent;
  bad_block.block_rows = 64;
  bad_block.block_cols = 64;
  CHECK(!engine->analyze(TensorView{data, DType::kF32, 1, 4, 1.0f}, {&bad_block, 1}, &a).ok());
  alignas(4) const std::uint8_t bytes[12] = {};
  CHECK(engine->analyze(TensorView{bytes + 1, DType::kF32, 1, 2, 1.0f}, {&spec, 1}, &a).message() ==
        "expected f32 data aligned to 4 bytes");
  const std::vector<QuantSpec> too_many(kMaxSpecsPerCall + 1);
  CHECK(!engine->analyze(TensorView{data, DType::kF32, 1, 4, 1.0f}, too_many, &a).ok());
  const std::uint8_t fp4[2] = {};
  CHECK(engine->analyze(TensorView{fp4, DType::kE2M1, 1, 3, 1.0f}, {&spec, 1}, &a).message() ==
        "expected e2m1 rows of whole bytes, got 3 columns");
}

// A job's own codes with their scales in one layout: every code value, scales across a range.
struct ObservedCase {
  std::vector<std::uint8_t> codes, scales;
  ObservedTensor tensor;
};

ObservedCase observed_case(DType dtype, ScaleLayout layout, std::int64_t rows, std::int64_t cols, bool k_outer) {
  ObservedCase c;
  const ScaledShape shape{rows, cols, k_outer};
  c.codes.resize(tensor_bytes(dtype, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols)));
  for (std::size_t i = 0; i < c.codes.size(); ++i) c.codes[i] = static_cast<std::uint8_t>(i * 37 % 251);
  if (layout != ScaleLayout::kTensorScalar) {
    c.scales.resize(scale_tensor_bytes(layout, shape));
    if (layout == ScaleLayout::kVec128F32 || layout == ScaleLayout::kBlock128x128F32) {
      for (std::size_t i = 0; i + 4 <= c.scales.size(); i += 4) {
        const float s = std::ldexp(1.0f, static_cast<int>(i / 4 % 13) - 6);
        std::memcpy(c.scales.data() + i, &s, 4);
      }
    } else {
      for (std::size_t i = 0; i < c.scales.size(); ++i) c.scales[i] = static_cast<std::uint8_t>(100 + i % 40);
    }
  }
  c.tensor.codes = c.codes.data();
  c.tensor.dtype = dtype;
  c.tensor.shape = shape;
  c.tensor.layout = layout;
  c.tensor.scales = c.scales;
  c.tensor.scale_inv = layout == ScaleLayout::kTensorScalar ? 0.0625f : 1.0f;
  return c;
}

TEST_CASE("a job's own codes read on every thread give what one thread reads, for every layout and K side",
          "[cpu_engine]") {
  const std::pair<DType, ScaleLayout> layouts[] = {
      {DType::kE4M3, ScaleLayout::kVec32Ue8m0},   {DType::kE2M1, ScaleLayout::kVec16Ue4m3},
      {DType::kE4M3, ScaleLayout::kVec128F32},    {DType::kE4M3, ScaleLayout::kBlock128x128F32},
      {DType::kE5M2, ScaleLayout::kTensorScalar}, {DType::kE2M1, ScaleLayout::kTensorScalar}};
  for (int threads : {1, 3, 8}) {
    auto engine = make_cpu_engine(threads);
    for (const auto& [dtype, layout] : layouts) {
      for (bool k_outer : {false, true}) {
        for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{256, 512}, {300, 1024}, {2, 65536}}) {
          INFO(threads << " threads, " << dtype_name(dtype) << " layout " << static_cast<int>(layout) << " " << rows
                       << "x" << cols << (k_outer ? " K outer" : ""));
          const ObservedCase c = observed_case(dtype, layout, rows, cols, k_outer);
          const Result<ObservedAnalysis> one = analyze_observed(c.tensor), all = engine->analyze_observed(c.tensor);
          REQUIRE(one.ok() == all.ok());
          if (!one.ok()) {
            CHECK(one.message() == all.message());
            continue;
          }
          const ObservedAnalysis &a = one.value(), &b = all.value();
          CHECK(a.moments.numel == b.moments.numel);
          CHECK(a.moments.finite == b.moments.finite);
          CHECK(a.moments.nonzero == b.moments.nonzero);
          CHECK(a.moments.amax == b.moments.amax);
          CHECK(a.moments.amin == b.moments.amin);
          CHECK(b.moments.sum == Approx(a.moments.sum).epsilon(1e-12).margin(1e-9));
          CHECK(b.moments.sum_squares == Approx(a.moments.sum_squares).epsilon(1e-12));
          CHECK(b.moments.m2 == Approx(a.moments.m2).epsilon(1e-12));
          CHECK(b.moments.m4 == Approx(a.moments.m4).epsilon(1e-12));
          CHECK(a.te_amax == b.te_amax);
          CHECK(a.stats.saturated == b.stats.saturated);
          CHECK(a.stats.scale_blocks == b.stats.scale_blocks);
          CHECK(a.stats.scale_blocks_at_floor == b.stats.scale_blocks_at_floor);
          CHECK(a.stats.scale_blocks_at_ceiling == b.stats.scale_blocks_at_ceiling);
          CHECK(a.stats.scale_min == b.stats.scale_min);
          CHECK(a.stats.scale_max == b.stats.scale_max);
          CHECK(a.stats.max_block_dynamic_range_log2 == b.stats.max_block_dynamic_range_log2);
          CHECK(std::equal(std::begin(a.stats.scale_histogram), std::end(a.stats.scale_histogram),
                           std::begin(b.stats.scale_histogram)));
        }
      }
    }
  }
}
