// Statistics throughput on a BF16 tensor (256 MiB by default) for each recipe alone, for the five
// FP8 recipes in one call and for the default recipes (what a policy that names none runs),
// against a streaming read-and-reduce of the same buffer by the same number of threads in the
// same run (BM_ReadReduce: the least any engine must do, built for the CPU's widest vector ISA as
// the engine is, named in its label; steadier on a shared machine than memcpy, whose write stream
// varies most; BM_ReadReduceBaseline is the same loop built for the compiler's baseline, SSE2, the
// figure the README reported before). Targets: one
// recipe <= 2x the read, the five FP8 recipes <= 4x; nvfp4 <= 1.5x mxfp8. Run with
// --benchmark_repetitions=N: the ratios then use the medians. Counters: "x_read",
// "x_read_baseline", "x_memcpy",
// "x_one_recipe" (several recipes against tensor_current alone) and "x_mxfp8" (the FP4 recipes
// against mxfp8). BM_OneRecipe/<name> runs each recipe of the vocabulary alone. BM_WeightRecipe/<name>
// runs the recipes whose weights take 2-D blocks (nvfp4's 16x16, mxfp8_2d's 32x32) on the tensor as
// a weight; "x_nvfp4_weight" is their time over nvfp4's (target <= 1.5x). "x_nvfp4" is each of
// NVFP4's options over nvfp4 on the operand it changes (target <= 1.5x): nvfp4_rht (the transform
// and its BF16 copy included), nvfp4_4over6 and nvfp4_row on X, nvfp4_sr on Dy.
// BM_ChannelAmax/<axis> is tensor_current with the channel amaxes ("x_one_recipe": target <= 1.1x).
// BM_WeightCodeDigest is the extra
// pass the daemon makes over each sampled weight for the inference check (one thread, no target;
// "x_one_recipe" puts it beside tensor_current's statistics). BM_Observed* decode a job's own codes
// with their block scales (MXFP8: E4M3 with E8M0 1x32 scales; NVFP4: E2M1 with UE4M3 1x16 scales)
// through the CPU engine, as the daemon does for every block-scaled sample ("x_read" and
// "x_memcpy" against the BF16 tensor's).
//   stats_engine_bench [--fp8scope_mib=N] [google benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fp8scope/kernels/code_digest.h"
#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/observed_analysis.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "median_reporter.h"

using namespace fp8scope;

namespace {

std::size_t g_mib = 256;
double g_read_seconds = 0.0;
double g_read_baseline_seconds = 0.0;
double g_memcpy_seconds = 0.0;
double g_one_recipe_seconds = 0.0;
double g_mxfp8_seconds = 0.0;
double g_nvfp4_seconds = 0.0;
double g_nvfp4_weight_seconds = 0.0;
double g_moe_read_seconds = 0.0;
double g_moe_one_seconds = 0.0;

// An LLM-activation-like BF16 tensor: unit normal values with a few outlier channels, from a fast
// deterministic generator (Box-Muller over xorshift).
const std::vector<std::uint16_t>& tensor() {
  static const std::vector<std::uint16_t> data = [] {
    std::vector<std::uint16_t> v(g_mib * 1024 * 1024 / 2);
    std::uint64_t s = 0x9E3779B97F4A7C15ull;
    auto uniform = [&] {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      return (static_cast<double>(s >> 11) + 0.5) * 0x1p-53;
    };
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double g = std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
      const float f = static_cast<float>(g * ((i % 4096) % 331 == 7 ? 300.0 : 1.0));
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      v[i] = static_cast<std::uint16_t>(u >> 16);
    }
    return v;
  }();
  return data;
}

TensorView view() {
  const auto& t = tensor();
  const std::int64_t cols = 8192;
  return TensorView{t.data(), DType::kBF16, static_cast<std::int64_t>(t.size()) / cols, cols, 1.0f};
}

// Every element of [first, last) folded into a sum: built for the widest vector ISA the CPU has,
// as the engine's kernels are (x86-64-v4 is AVX-512, v3 AVX2), or for the compiler's baseline.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) std::uint64_t
read_sum(const std::uint16_t* first, const std::uint16_t* last) {
  std::uint64_t sum = 0;
  for (const std::uint16_t* p = first; p < last; ++p) sum += *p;
  return sum;
}
std::uint64_t read_sum_baseline(const std::uint16_t* first, const std::uint16_t* last) {
  std::uint64_t sum = 0;
  for (const std::uint16_t* p = first; p < last; ++p) sum += *p;
  return sum;
}

// The ISA read_sum runs with here, named as the engine's kernels are.
const char* read_isa() {
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4 (AVX-512)";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3 (AVX2)";
  return "baseline (SSE2)";
}

// Every element read once and folded into a sum, by as many threads as the CPU engine starts,
// each over its own contiguous share: with the per-ISA build (BM_ReadReduce, the baseline every
// "x_read" is against) or the compiler's baseline (BM_ReadReduceBaseline, "x_read_baseline").
template <std::uint64_t (*Sum)(const std::uint16_t*, const std::uint16_t*)>
void read_reduce(benchmark::State& state) {
  const auto& t = tensor();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::uint64_t> sums(threads);
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (unsigned k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        const std::size_t first = t.size() * k / threads, last = t.size() * (k + 1) / threads;
        sums[k] = Sum(t.data() + first, t.data() + last);
      });
    }
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.size() * 2));
}
void BM_ReadReduce(benchmark::State& state) {
  read_reduce<read_sum>(state);
  state.SetLabel(read_isa());
}
void BM_ReadReduceBaseline(benchmark::State& state) { read_reduce<read_sum_baseline>(state); }

void BM_Memcpy(benchmark::State& state) {
  const auto& t = tensor();
  std::vector<std::uint16_t> dst(t.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), t.data(), t.size() * 2);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.size() * 2));
  g_memcpy_seconds = 0.0;
}

// The recipes' plans for an operand (delayed scaling with a fixed scale of 100).
std::vector<RecipePlan> plans_for(const std::vector<RecipeKind>& kinds, Operand operand) {
  std::vector<RecipePlan> plans;
  for (RecipeKind k : kinds) {
    RecipePlan p;
    p.recipe = default_recipe(k);
    p.format = p.recipe.format_for(operand);
    p.operand = operand;
    if (k == RecipeKind::kTensorDelayed) p.scale = 100.0f;
    plans.push_back(p);
  }
  return plans;
}

void run_recipes(benchmark::State& state, const std::vector<RecipeKind>& kinds, Operand operand = Operand::kX,
                 ChannelAxis channels = ChannelAxis::kNone) {
  auto engine = make_cpu_engine();
  const std::vector<RecipePlan> plans = plans_for(kinds, operand);
  TensorView t = view();
  t.channels = channels;
  for (auto _ : state) {
    Result<TensorReport> r = analyze_recipes(*engine, t, plans);
    if (!r.ok()) state.SkipWithError("analyze failed");
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.numel() * 2));
}

void BM_FiveFp8Recipes(benchmark::State& state) {
  run_recipes(state, {RecipeKind::kTensorCurrent, RecipeKind::kTensorDelayed, RecipeKind::kMxfp8,
                      RecipeKind::kBlock1x128, RecipeKind::kBlock128x128});
}
void BM_DefaultRecipes(benchmark::State& state) {
  run_recipes(state, std::vector<RecipeKind>(std::begin(kDefaultRecipeKinds), std::end(kDefaultRecipeKinds)));
}

// A mixture-of-experts step as the daemon receives it: 256 experts' tensors from 64 KiB to 4 MiB
// (log-spaced; rows of 2048 BF16 columns, consecutive in the tensor), every default recipe on each
// by the daemon's two analysis workers sharing one engine (BM_MoeStep), against the read of the same bytes (BM_MoeStepRead, "x_read") and against one
// tensor of those bytes (BM_MoeStepAsOne): "fixed_share" is the part of the step's time the
// tensors' number adds, the engine's per-call fixed costs (target < 10%).
constexpr int kMoeExperts = 256;
constexpr std::int64_t kMoeCols = 2048;
const std::vector<TensorView>& moe_tensors() {
  static const std::vector<TensorView> views = [] {
    // Consecutive in the tensor, from its start again where one would run past its end (a small
    // --fp8scope_mib), and no larger than it.
    std::vector<TensorView> v;
    const auto& t = tensor();
    const std::int64_t capacity_rows = static_cast<std::int64_t>(t.size()) / kMoeCols;
    std::int64_t at = 0;
    for (int e = 0; e < kMoeExperts; ++e) {
      const double bytes = 65536.0 * std::pow(64.0, static_cast<double>(e) / (kMoeExperts - 1));
      const std::int64_t rows = std::min(capacity_rows, std::max<std::int64_t>(16, static_cast<std::int64_t>(bytes / 2 / kMoeCols) / 16 * 16));
      if (at + rows > capacity_rows) at = 0;
      v.push_back(TensorView{t.data() + at * kMoeCols, DType::kBF16, rows, kMoeCols, 1.0f});
      at += rows;
    }
    return v;
  }();
  return views;
}
std::int64_t moe_elements() {
  std::int64_t n = 0;
  for (const TensorView& t : moe_tensors()) n += t.numel();
  return n;
}
// As the daemon analyzes them: its analysis workers (2 by default) each take the next tensor and
// share one engine.
constexpr int kAnalysisWorkers = 2;
void moe_analyze(benchmark::State& state, const std::vector<TensorView>& tensors) {
  auto engine = make_cpu_engine();
  const std::vector<RecipePlan> plans =
      plans_for(std::vector<RecipeKind>(std::begin(kDefaultRecipeKinds), std::end(kDefaultRecipeKinds)), Operand::kX);
  std::atomic<bool> failed{false};
  for (auto _ : state) {
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < kAnalysisWorkers; ++w) {
      workers.emplace_back([&] {
        for (std::size_t i; (i = next.fetch_add(1)) < tensors.size();) {
          Result<TensorReport> r = analyze_recipes(*engine, tensors[i], plans);
          if (!r.ok()) failed = true;
          benchmark::DoNotOptimize(r);
        }
      });
    }
    for (std::thread& w : workers) w.join();
  }
  if (failed) state.SkipWithError("analyze failed");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * moe_elements() * 2));
}
void BM_MoeStep(benchmark::State& state) { moe_analyze(state, moe_tensors()); }
// The step's bytes as few tensors as the buffer holds them: one, unless --fp8scope_mib is small.
std::vector<TensorView> moe_bytes_as_one() {
  const std::int64_t capacity_rows = static_cast<std::int64_t>(tensor().size()) / kMoeCols;
  std::vector<TensorView> v;
  for (std::int64_t left = moe_elements() / kMoeCols; left > 0; left -= capacity_rows) {
    v.push_back(TensorView{tensor().data(), DType::kBF16, std::min(left, capacity_rows), kMoeCols, 1.0f});
  }
  return v;
}
void BM_MoeStepAsOne(benchmark::State& state) { moe_analyze(state, moe_bytes_as_one()); }
void BM_MoeStepRead(benchmark::State& state) {
  const std::vector<TensorView> pieces = moe_bytes_as_one();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::uint64_t> sums(threads);
  for (auto _ : state) {
    for (const TensorView& piece : pieces) {
      const auto* first = static_cast<const std::uint16_t*>(piece.data);
      const std::int64_t n = piece.numel();
      std::vector<std::thread> pool;
      for (unsigned k = 0; k < threads; ++k) {
        pool.emplace_back([&, k] { sums[k] += read_sum(first + n * k / threads, first + n * (k + 1) / threads); });
      }
      for (auto& th : pool) th.join();
    }
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * moe_elements() * 2));
}

// A job's own codes of the BF16 tensor's shape (a byte, or half a byte, an element) with a scale
// tensor in cuBLASLt's tiled layout: codes and scales cycle through every value the formats hold.
void observed(benchmark::State& state, DType dtype, ScaleLayout layout) {
  const TensorView t = view();
  const ScaledShape shape{t.rows, t.cols, false};
  std::vector<std::uint8_t> codes(tensor_bytes(dtype, static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols)));
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 37 % 251);
  std::vector<std::uint8_t> scales(scale_tensor_bytes(layout, shape));
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>(100 + i % 40);  // finite scales
  ObservedTensor o;
  o.codes = codes.data();
  o.dtype = dtype;
  o.shape = shape;
  o.layout = layout;
  o.scales = scales;
  auto engine = make_cpu_engine();
  for (auto _ : state) {
    Result<ObservedAnalysis> a = engine->analyze_observed(o);
    if (!a.ok()) state.SkipWithError(a.message().c_str());
    benchmark::DoNotOptimize(a);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * (codes.size() + scales.size())));
}
void BM_ObservedMxfp8(benchmark::State& state) { observed(state, DType::kE4M3, ScaleLayout::kVec32Ue8m0); }
void BM_ObservedNvfp4(benchmark::State& state) { observed(state, DType::kE2M1, ScaleLayout::kVec16Ue4m3); }

void BM_WeightCodeDigest(benchmark::State& state) {
  const TensorView t = view();
  for (auto _ : state) benchmark::DoNotOptimize(quantized_code_digest(t, CastFormat::kE4M3, 100.0f));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.numel() * 2));
}

// Each run's time as a ratio to the baselines measured earlier in the same process.
void ratios(const std::string& name, double seconds, benchmark::UserCounters& counters) {
  if (name.rfind("BM_ReadReduceBaseline", 0) == 0) {
    g_read_baseline_seconds = seconds;
  } else if (name.rfind("BM_ReadReduce", 0) == 0) {
    g_read_seconds = seconds;
  }
  if (name.rfind("BM_Memcpy", 0) == 0) g_memcpy_seconds = seconds;
  const std::string one = "BM_OneRecipe/";
  if (name.rfind(one + recipe_name(RecipeKind::kTensorCurrent), 0) == 0) g_one_recipe_seconds = seconds;
  if (name.rfind(one + recipe_name(RecipeKind::kMxfp8), 0) == 0) g_mxfp8_seconds = seconds;
  if (name.rfind(one + recipe_name(RecipeKind::kNvfp4) + "/", 0) == 0) g_nvfp4_seconds = seconds;
  for (RecipeKind k : kAllRecipeKinds) {
    // Each of NVFP4's options against nvfp4 on the same tensor (target <= 1.5x).
    if (g_nvfp4_seconds > 0 && default_recipe(k).nvfp4_option() && name.rfind(one + recipe_name(k) + "/", 0) == 0) {
      counters["x_nvfp4"] = seconds / g_nvfp4_seconds;
    }
    if (g_mxfp8_seconds > 0 && default_recipe(k).fp4() && name.rfind(one + recipe_name(k), 0) == 0) {
      counters["x_mxfp8"] = seconds / g_mxfp8_seconds;
    }
  }
  // Recipes whose weights take 2-D blocks, on the tensor as a weight, against NVFP4's 16x16.
  const std::string weight = "BM_WeightRecipe/";
  if (name.rfind(weight + recipe_name(RecipeKind::kNvfp4) + "/", 0) == 0) g_nvfp4_weight_seconds = seconds;
  else if (g_nvfp4_weight_seconds > 0 && name.rfind(weight, 0) == 0) counters["x_nvfp4_weight"] = seconds / g_nvfp4_weight_seconds;
  // The mixture-of-experts step: against its own bytes' read, and one tensor of them.
  if (name.rfind("BM_MoeStep", 0) == 0) {
    if (name.rfind("BM_MoeStepRead", 0) == 0) g_moe_read_seconds = seconds;
    if (name.rfind("BM_MoeStepAsOne", 0) == 0) g_moe_one_seconds = seconds;
    if (name.rfind("BM_MoeStepRead", 0) != 0 && g_moe_read_seconds > 0) counters["x_read"] = seconds / g_moe_read_seconds;
    if (name.rfind("BM_MoeStep/", 0) == 0 && g_moe_one_seconds > 0) {
      counters["fixed_share"] = std::max(0.0, seconds - g_moe_one_seconds) / seconds;
    }
    return;
  }
  const bool baseline = name.rfind("BM_Memcpy", 0) == 0 || name.rfind("BM_ReadReduce", 0) == 0;
  if (g_read_seconds > 0 && !baseline) counters["x_read"] = seconds / g_read_seconds;
  if (g_read_baseline_seconds > 0 && !baseline) counters["x_read_baseline"] = seconds / g_read_baseline_seconds;
  if (g_memcpy_seconds > 0 && !baseline) counters["x_memcpy"] = seconds / g_memcpy_seconds;
  if (g_one_recipe_seconds > 0 && (name.rfind("BM_DefaultRecipes", 0) == 0 || name.rfind("BM_FiveFp8Recipes", 0) == 0 ||
                                   name.rfind("BM_WeightCodeDigest", 0) == 0 || name.rfind("BM_ChannelAmax", 0) == 0)) {
    counters["x_one_recipe"] = seconds / g_one_recipe_seconds;
  }
}

}  // namespace

// In the order the ratios need: the baselines first, then every recipe alone (tensor_current and
// mxfp8 among them), then the combinations.
void register_benchmarks() {
  benchmark::RegisterBenchmark("BM_ReadReduce", BM_ReadReduce)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ReadReduceBaseline", BM_ReadReduceBaseline)->UseRealTime();
  benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)->UseRealTime();
  for (RecipeKind k : kAllRecipeKinds) {
    // Stochastic rounding changes gradients only: nvfp4_sr runs on the tensor as Dy.
    const Operand operand = default_recipe(k).stochastic_rounding ? Operand::kDy : Operand::kX;
    benchmark::RegisterBenchmark((std::string("BM_OneRecipe/") + recipe_name(k)).c_str(),
                                 [k, operand](benchmark::State& state) { run_recipes(state, {k}, operand); })
        ->UseRealTime();
  }
  for (RecipeKind k : kAllRecipeKinds) {
    if (k != RecipeKind::kNvfp4 && default_recipe(k).weight_block_rows == 0) continue;
    benchmark::RegisterBenchmark((std::string("BM_WeightRecipe/") + recipe_name(k)).c_str(),
                                 [k](benchmark::State& state) { run_recipes(state, {k}, Operand::kW); })
        ->UseRealTime();
  }
  // tensor_current with each channel amax (the budget: at most 10% over BM_OneRecipe).
  for (const auto& [name, operand] : {std::pair{"columns", Operand::kX}, std::pair{"rows", Operand::kW}}) {
    benchmark::RegisterBenchmark((std::string("BM_ChannelAmax/") + name).c_str(), [operand](benchmark::State& state) {
      run_recipes(state, {RecipeKind::kTensorCurrent}, operand, channel_axis_for(operand));
    })->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_FiveFp8Recipes", BM_FiveFp8Recipes)->UseRealTime();
  benchmark::RegisterBenchmark("BM_DefaultRecipes", BM_DefaultRecipes)->UseRealTime();
  benchmark::RegisterBenchmark("BM_WeightCodeDigest", BM_WeightCodeDigest)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ObservedMxfp8", BM_ObservedMxfp8)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ObservedNvfp4", BM_ObservedNvfp4)->UseRealTime();
  benchmark::RegisterBenchmark("BM_MoeStepRead", BM_MoeStepRead)->UseRealTime();
  benchmark::RegisterBenchmark("BM_MoeStepAsOne", BM_MoeStepAsOne)->UseRealTime();
  benchmark::RegisterBenchmark("BM_MoeStep", BM_MoeStep)->UseRealTime();
}

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--fp8scope_mib=", 0) == 0) {
      g_mib = std::strtoul(a.c_str() + 15, nullptr, 10);
      if (g_mib == 0) g_mib = 1;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  register_benchmarks();
  benchmark::Initialize(&n, args.data());
  bench::MedianReporter reporter(ratios);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
