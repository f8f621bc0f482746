// fp8scope_gpu_check: what scripts/gpu-check.sh runs on a GPU machine. Checks that the hardware
// cast (cvt.rn.satfinite) and the shared software path agree for every BF16 input, that the CUDA
// engine agrees with the CPU engine on random and adversarial tensors (counts exactly, sums within
// 1e-6), times the statistics kernels against a device-to-device copy of the same bytes and the
// cuBLASLt GEMM check, and prints a table. Exit code 1 when an agreement check fails.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/cuda_plugin.h"
#include "fp8scope/kernels/gemm_check.h"
#include "fp8scope/kernels/gpu_gemm_check.h"
#include "stats_kernels.cuh"

extern "C" fp8scope::StatsEngine* fp8scope_cuda_engine_create(int, std::uint64_t, char*, std::size_t);
extern "C" fp8scope::GpuGemmCheck* fp8scope_cuda_gemm_check_create(int, char*, std::size_t);

using namespace fp8scope;

namespace {

struct Row {
  std::string check, result;
  bool ok;
};
std::vector<Row> g_rows;

void report(const std::string& check, const std::string& result, bool ok) {
  g_rows.push_back({check, result, ok});
  std::printf("%-58s %-48s %s\n", check.c_str(), result.c_str(), ok ? "ok" : "FAIL");
  std::fflush(stdout);
}

#define CHECK_CUDA(call)                                                                     \
  do {                                                                                       \
    const cudaError_t e = (call);                                                            \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "gpu-check: %s: %s\n", #call, cudaGetErrorString(e));             \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

void cast_agreement() {
  const float scales[] = {1.0f, 0.5f, 3.0f, 179.2f, 0x1p-10f, 0x1p20f, 1e-30f, 0x1.fffffep127f};
  std::vector<float> inputs;
  for (float s : scales)
    for (std::uint32_t h = 0; h < 65536; ++h) inputs.push_back(bits_float(h << 16) * s);
  float* d_in = nullptr;
  unsigned long long* d_bad = nullptr;
  CHECK_CUDA(cudaMalloc(&d_in, inputs.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&d_bad, sizeof(unsigned long long)));
  CHECK_CUDA(cudaMemcpy(d_in, inputs.data(), inputs.size() * sizeof(float), cudaMemcpyHostToDevice));
  for (CastFormat f : {CastFormat::kE4M3, CastFormat::kE5M2}) {
    CHECK_CUDA(cudaMemset(d_bad, 0, sizeof(unsigned long long)));
    const auto n = static_cast<std::int64_t>(inputs.size());
    cuda::hardware_cast_agreement_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(d_in, n, f, d_bad);
    unsigned long long bad = 0;
    CHECK_CUDA(cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost));
    report(std::string("hardware vs software cast, ") + format_name(f) + ", 65536 BF16 x 8 scales",
           std::to_string(bad) + " mismatches", bad == 0);
  }
  cudaFree(d_in);
  cudaFree(d_bad);
}

std::vector<float> generate(int kind, std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::student_t_distribution<float> heavy(1.5f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    float x = 0;
    switch (kind) {
      case 0: x = normal(rng); break;
      case 1: x = heavy(rng); break;
      case 2: x = normal(rng) * (i % 97 == 3 ? 2000.0f : 1.0f); break;
      case 3: x = normal(rng) * 1e-7f; break;
      case 4: x = 0.0f; break;
      default: x = (i % 101 == 0) ? NAN : (i % 103 == 0 ? INFINITY : normal(rng) * 30.0f);
    }
    v[static_cast<std::size_t>(i)] = x;
  }
  return v;
}

std::vector<std::uint8_t> as_dtype(const std::vector<float>& v, DType d) {
  std::vector<std::uint8_t> out(v.size() * static_cast<std::size_t>(dtype_bytes(d)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint32_t u = float_bits(v[i]);
    if (d == DType::kF32) std::memcpy(&out[i * 4], &v[i], 4);
    if (d == DType::kBF16) {
      const std::uint16_t h = static_cast<std::uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
      std::memcpy(&out[i * 2], &h, 2);
    }
    if (d == DType::kE4M3) out[i] = encode<kE4M3>(v[i], Saturation::kSatFinite).code;
  }
  return out;
}

double relative(double a, double b, double magnitude) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  return std::fabs(a - b) / (magnitude > 0 ? magnitude : 1.0);
}

// GPU engine vs CPU engine: counts exactly (expected counts of stochastic rounding within 1e-9),
// sums within 1e-6 of their magnitude. Three calls a tensor, each within kMaxSpecsPerCall: the
// default recipes' and mxfp8_2d's weight quantization (the 2-D blocks), the default recipes'
// activation quantization with an E5M2 gradient's, and NVFP4's options on the operands they change
// (4over6's X and W, stochastic rounding's Dy, row scaling's X).
void engine_agreement(StatsEngine& gpu) {
  auto cpu = make_cpu_engine();
  const auto spec = [](RecipeKind k, Operand operand) {
    const std::optional<float> fixed = k == RecipeKind::kTensorDelayed ? std::optional<float>(3.5f) : std::nullopt;
    const Recipe recipe = default_recipe(k);
    return quant_spec_for(recipe, recipe.format_for(operand), operand, fixed).value();
  };
  std::vector<QuantSpec> weights, activations;
  for (RecipeKind k : kDefaultRecipeKinds) weights.push_back(spec(k, Operand::kW));
  weights.push_back(spec(RecipeKind::kMxfp8_2d, Operand::kW));
  for (RecipeKind k : kDefaultRecipeKinds) activations.push_back(spec(k, Operand::kX));
  activations.push_back(quant_spec_for(default_recipe(RecipeKind::kTensorCurrent), CastFormat::kE5M2, Operand::kDy, std::nullopt).value());
  std::vector<QuantSpec> options = {spec(RecipeKind::kNvfp4FourOverSix, Operand::kX),
                                          spec(RecipeKind::kNvfp4FourOverSix, Operand::kW),
                                          spec(RecipeKind::kNvfp4Sr, Operand::kDy), spec(RecipeKind::kNvfp4Row, Operand::kX)};
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 16}, {217, 256}, {1024, 4096}};
  int cases = 0, failures = 0;
  double worst = 0;
  for (const std::vector<QuantSpec>* set : {&weights, &activations, &options})
    for (DType d : {DType::kBF16, DType::kF32, DType::kE4M3})
      for (int kind = 0; kind < 6; ++kind)
        for (auto [rows, cols] : shapes) {
          const std::vector<QuantSpec>& specs = *set;
          const std::vector<float> v = generate(kind, rows * cols, 7u + static_cast<std::uint32_t>(kind));
          const std::vector<std::uint8_t> bytes = as_dtype(v, d);
          // W's channels are its rows, X's its columns: both of the channel amax paths.
          const TensorView t{bytes.data(), d, rows, cols, 1.0f,
                             set == &weights ? ChannelAxis::kRows : ChannelAxis::kColumns};
          TensorAnalysis a, b;
          ++cases;
          if (!cpu->analyze(t, specs, &a).ok() || !gpu.analyze(t, specs, &b).ok()) {
            ++failures;
            continue;
          }
          bool ok = a.moments.numel == b.moments.numel && a.moments.finite == b.moments.finite &&
                    a.moments.nonzero == b.moments.nonzero && a.moments.nan == b.moments.nan &&
                    a.moments.inf == b.moments.inf && a.moments.amax == b.moments.amax && a.moments.amin == b.moments.amin &&
                    a.channel_amax == b.channel_amax;
          double err = relative(a.moments.sum_squares, b.moments.sum_squares, a.moments.sum_squares);
          err = std::max(err, relative(a.moments.m2, b.moments.m2, a.moments.m2 + a.moments.sum_squares));
          err = std::max(err, relative(a.moments.m4, b.moments.m4, a.moments.m4));
          for (std::size_t k = 0; k < specs.size(); ++k) {
            const QuantStats &p = a.quant[k], &q = b.quant[k];
            const auto counts_agree = [&](double x, double y) {
              return specs[k].stochastic ? relative(x, y, std::max(1.0, x)) <= 1e-9 : x == y;
            };
            ok = ok && counts_agree(p.underflow, q.underflow) && counts_agree(p.overflow, q.overflow) &&
                 counts_agree(p.saturated, q.saturated) && p.scale_min == q.scale_min && p.scale_max == q.scale_max &&
                 std::equal(std::begin(p.histogram), std::end(p.histogram), std::begin(q.histogram));
            err = std::max(err, relative(p.squared_error, q.squared_error, p.squared_error));
            err = std::max(err, relative(p.dequant_squares, q.dequant_squares, p.dequant_squares));
            err = std::max(err, relative(p.dot, q.dot, std::sqrt(a.moments.sum_squares * p.dequant_squares)));
          }
          worst = std::max(worst, err);
          if (!ok || err > 1e-6) {
            ++failures;
            std::printf("  mismatch: %s specs, dtype %s kind %d shape %lldx%lld (counts %s, worst sum error %.2e)\n",
                        set == &weights ? "W" : (set == &options ? "NVFP4 option" : "X"), dtype_name(d), kind, static_cast<long long>(rows),
                        static_cast<long long>(cols), ok ? "equal" : "DIFFER", err);
          }
        }
  char result[128];
  std::snprintf(result, sizeof result, "%d of %d cases agree, worst sum error %.1e", cases - failures, cases, worst);
  report("CUDA engine vs CPU engine (3 dtypes x 6 tensors x 3 shapes, X and W of each recipe, NVFP4's options, channel amax)", result, failures == 0);
}

// A job's own codes on the GPU vs the CPU: every code and a spread of finite scales in each scale
// layout (MXFP8 E8M0 1x32, NVFP4 UE4M3 1x16, FP8 block scaling's fp32 1x128 and 128x128, a
// per-tensor scale), K along the rows and along the columns; counts and the block statistics
// exactly, sums within 1e-6 of their magnitude.
void observed_agreement(StatsEngine& gpu) {
  struct Case {
    DType dtype;
    ScaleLayout layout;
  };
  const Case cases[] = {{DType::kE4M3, ScaleLayout::kVec32Ue8m0},    {DType::kE2M1, ScaleLayout::kVec16Ue4m3},
                        {DType::kE4M3, ScaleLayout::kVec128F32},     {DType::kE4M3, ScaleLayout::kBlock128x128F32},
                        {DType::kE5M2, ScaleLayout::kTensorScalar}, {DType::kE2M1, ScaleLayout::kTensorScalar}};
  int total = 0, failures = 0;
  double worst = 0;
  for (const Case& c : cases)
    for (bool k_outer : {false, true})
      for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{128, 256}, {384, 1024}}) {
        const ScaledShape shape{rows, cols, k_outer};
        std::vector<std::uint8_t> codes(tensor_bytes(c.dtype, rows, cols));
        for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 37 % 251);
        std::vector<std::uint8_t> scales;
        if (c.layout != ScaleLayout::kTensorScalar) {
          scales.resize(scale_tensor_bytes(c.layout, shape));
          const bool f32 = c.layout == ScaleLayout::kVec128F32 || c.layout == ScaleLayout::kBlock128x128F32;
          for (std::size_t i = 0; i < scales.size(); ++i) {
            scales[i] = f32 ? (i % 4 == 3 ? static_cast<std::uint8_t>(0x3A + i / 4 % 8) : 0) : static_cast<std::uint8_t>(100 + i % 40);
          }
        }
        ObservedTensor t;
        t.codes = codes.data();
        t.dtype = c.dtype;
        t.shape = shape;
        t.layout = c.layout;
        t.scales = scales;
        t.scale_inv = c.layout == ScaleLayout::kTensorScalar ? 0.0625f : 1.0f;
        ++total;
        const Result<ObservedAnalysis> a = analyze_observed(t), b = gpu.analyze_observed(t);
        if (!a.ok() || !b.ok()) {
          ++failures;
          std::printf("  observed %s %d: %s\n", dtype_name(c.dtype), static_cast<int>(c.layout),
                      (a.ok() ? b : a).message().c_str());
          continue;
        }
        const ObservedAnalysis &x = a.value(), &y = b.value();
        const QuantStats &p = x.stats, &q = y.stats;
        const bool ok = x.moments.numel == y.moments.numel && x.moments.finite == y.moments.finite &&
                        x.moments.nonzero == y.moments.nonzero && x.moments.amax == y.moments.amax &&
                        x.moments.amin == y.moments.amin && p.saturated == q.saturated &&
                        p.scale_blocks == q.scale_blocks && p.scale_blocks_at_floor == q.scale_blocks_at_floor &&
                        p.scale_blocks_at_ceiling == q.scale_blocks_at_ceiling && p.scale_min == q.scale_min &&
                        p.scale_max == q.scale_max && p.max_block_dynamic_range_log2 == q.max_block_dynamic_range_log2 &&
                        std::equal(std::begin(p.scale_histogram), std::end(p.scale_histogram), std::begin(q.scale_histogram));
        double err = relative(x.moments.sum_squares, y.moments.sum_squares, x.moments.sum_squares);
        err = std::max(err, relative(x.moments.m2, y.moments.m2, x.moments.m2 + x.moments.sum_squares));
        err = std::max(err, relative(x.moments.m4, y.moments.m4, x.moments.m4));
        worst = std::max(worst, err);
        if (!ok || err > 1e-6) {
          ++failures;
          std::printf("  mismatch: observed %s layout %d %lldx%lld k_outer %d (counts %s, worst sum error %.2e)\n",
                      dtype_name(c.dtype), static_cast<int>(c.layout), static_cast<long long>(rows),
                      static_cast<long long>(cols), k_outer ? 1 : 0, ok ? "equal" : "DIFFER", err);
        }
      }
  char result[128];
  std::snprintf(result, sizeof result, "%d of %d cases agree, worst sum error %.1e", total - failures, total, worst);
  report("CUDA observed codes vs CPU (6 layouts x 2 K sides x 2 shapes)", result, failures == 0);
}

template <class F>
double time_ms(F f, int repeats) {
  f();  // warm up
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < repeats; ++i) f();
  cudaEventRecord(stop);
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  return ms / repeats;
}

// The statistics kernels on a device-resident 1 GiB BF16 tensor vs copying the same bytes.
void bandwidth() {
  const std::int64_t rows = 16384, cols = 32768;  // 512 Mi elements, 1 GiB
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * 2;
  void *src = nullptr, *dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  {
    std::vector<float> row = generate(2, cols, 3);
    std::vector<std::uint8_t> b = as_dtype(row, DType::kBF16);
    for (std::int64_t r = 0; r < rows; ++r) CHECK_CUDA(cudaMemcpy(static_cast<char*>(src) + r * cols * 2, b.data(), b.size(), cudaMemcpyHostToDevice));
  }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int grid = sms * 8;
  TensorMoments* moments = nullptr;
  QuantStats* partial = nullptr;
  CHECK_CUDA(cudaMalloc(&moments, sizeof(TensorMoments) * grid));
  CHECK_CUDA(cudaMalloc(&partial, sizeof(QuantStats) * grid * 5));
  const double copy = time_ms([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); }, 10);
  cuda::SpecTable one;
  one.count = 1;
  one.spec[0].spec = quant_spec_for(default_recipe(RecipeKind::kTensorCurrent), CastFormat::kE4M3, Operand::kX, std::nullopt).value();
  one.spec[0].tensor_scale = 100.0f;
  one.spec[0].tensor_scale_inv = 0.01f;
  const double stats_one = time_ms(
      [&] {
        cuda::moments_kernel<<<grid, cuda::kThreads>>>(src, DType::kBF16, 1.0f, rows * cols, moments);
        cuda::quantize_kernel<<<grid, cuda::kThreads>>>(src, DType::kBF16, 1.0f, rows, cols, one, partial);
      },
      5);
  cuda::SpecTable five = one;
  five.count = 3;  // per-tensor specs only: block scales need their amax tables (the engine builds them)
  for (int k = 1; k < 3; ++k) five.spec[k] = one.spec[0];
  const double stats_three = time_ms(
      [&] {
        cuda::moments_kernel<<<grid, cuda::kThreads>>>(src, DType::kBF16, 1.0f, rows * cols, moments);
        cuda::quantize_kernel<<<grid, cuda::kThreads>>>(src, DType::kBF16, 1.0f, rows, cols, five, partial);
      },
      5);
  char result[160];
  // A copy reads and writes the bytes once; the statistics read them twice (moments, casts).
  std::snprintf(result, sizeof result, "copy %.2f ms (%.0f GB/s), stats %.2f ms: %.2f of copy", copy,
                2.0 * bytes / copy / 1e6, stats_one, copy / stats_one);
  report("1 GiB BF16: stats (1 recipe) vs D2D copy, target >= 0.7", result, copy / stats_one >= 0.7);
  std::snprintf(result, sizeof result, "%.2f ms, %.2fx one recipe", stats_three, stats_three / stats_one);
  report("1 GiB BF16: stats with 3 per-tensor recipes in one pass", result, true);
  cudaFree(src);
  cudaFree(dst);
  cudaFree(moments);
  cudaFree(partial);
}

void gemm(GpuGemmCheck& check) {
  for (std::int64_t size : {512, 4096}) {
    std::vector<float> x = generate(2, size * size, 11), w = generate(0, size * size, 12);
    for (float& v : w) v *= 0.02f;
    const std::vector<std::uint8_t> xb = as_dtype(x, DType::kBF16), wb = as_dtype(w, DType::kBF16);
    const TensorView xv{xb.data(), DType::kBF16, size, size, 1.0f}, wv{wb.data(), DType::kBF16, size, size, 1.0f};
    const auto start = std::chrono::steady_clock::now();
    auto r = check.run(xv, wv);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!r.ok()) {
      report("cuBLASLt GEMM check " + std::to_string(size) + "^3", r.message(), false);
      continue;
    }
    char result[200];
    std::snprintf(result, sizeof result, "fast mse %.3g cos %.6f, precise mse %.3g cos %.6f, %.0f ms", r.value()[0].mse,
                  r.value()[0].cosine, r.value()[1].mse, r.value()[1].cosine, ms);
    bool ok = r.value()[1].cosine > 0.99;
    if (size == 512) {  // the CPU emulation of the same GEMM: the same error, up to accumulation order
      auto cpu = gemm_check_cpu(xv, wv, CastFormat::kE4M3);
      ok = ok && cpu.ok() && std::fabs(cpu.value().mse - r.value()[1].mse) <= 0.05 * cpu.value().mse;
    }
    report("cuBLASLt GEMM check " + std::to_string(size) + "^3 (BF16 vs E4M3)", result, ok);
  }
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "gpu-check: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device 0: %s, sm_%d%d, %d SMs, %.0f GiB\n\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0);
  char error[512] = "";
  std::unique_ptr<StatsEngine> engine(fp8scope_cuda_engine_create(0, 8ull << 30, error, sizeof error));
  std::unique_ptr<GpuGemmCheck> gemm_check(fp8scope_cuda_gemm_check_create(0, error, sizeof error));
  if (!engine || !gemm_check) {
    std::fprintf(stderr, "gpu-check: %s\n", error);
    return 2;
  }
  cast_agreement();
  engine_agreement(*engine);
  observed_agreement(*engine);
  bandwidth();
  gemm(*gemm_check);
  std::printf("\n%-58s %-48s %s\n", "check", "result", "");
  bool all = true;
  for (const Row& r : g_rows) {
    std::printf("%-58s %-48s %s\n", r.check.c_str(), r.result.c_str(), r.ok ? "ok" : "FAIL");
    all = all && r.ok;
  }
  return all ? 0 : 1;
}
