// What the hook costs the calling thread, against the same cublasLtMatmul called directly in the
// same run (the cuBLASLt CPU fixture on a 1x1x1 problem, so the GEMM itself is nearly free):
//  - an unsampled call, with steps from fp8scope_step (target: <= 100 ns added, median), and with
//    steps from the first GEMM's signature (four descriptor reads more);
//  - a sampled call, excluding the copy (the fixture's copies are 4-byte memcpys; target <= 10 us).
// The binary runs itself again with LD_PRELOAD=libfp8scope_hook.so so the hook interposes exactly
// as in a training job. The shared ring is made large enough for every sample of the run and no
// shipper drains it (/bin/true stands in), so nothing but the hook's own threads shares the CPU.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

using MatmulFn = decltype(&cublasLtMatmul);

struct Problem {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  float x = 1.0f, y = 2.0f, out = 0.0f, one = 1.0f, zero = 0.0f;

  Problem() {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    cuInit(0);
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
    cublasLtCreate(&handle);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const std::int32_t t = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);  // TN: an fprop
    cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, 1, 1, 1);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, 1, 1, 1);
    cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, 1, 1, 1);
  }
  cublasStatus_t run(MatmulFn f) {
    return f(handle, desc, &one, &x, a, &y, b, &zero, &out, d, &out, d, nullptr, nullptr, 0, nullptr);
  }
};

Problem& problem() {
  static Problem p;
  return p;
}

MatmulFn direct() {
  static MatmulFn f = [] {
    void* lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_NOLOAD);
    return reinterpret_cast<MatmulFn>(dlsym(lib, "cublasLtMatmul"));  // the fixture's own definition
  }();
  return f;
}

MatmulFn hooked() { return &cublasLtMatmul; }  // resolves to the preloaded hook

void fp8scope_step(std::uint64_t step) {
  static auto f = reinterpret_cast<void (*)(std::uint64_t)>(dlsym(RTLD_DEFAULT, "fp8scope_step"));
  if (f != nullptr) f(step);
}

void BM_DirectCall(benchmark::State& state) {
  problem().run(hooked());  // the hook's first call sets up the shared ring and starts the shipper: not timed
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(direct()));
}

// Must run before anything calls fp8scope_step (the C API then becomes the step source for good).
void BM_HookedUnsampledStepsFromSignature(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(hooked()));
}

void BM_HookedUnsampledStepsFromApi(benchmark::State& state) {
  fp8scope_step(1);  // FP8SCOPE_START_STEP is far beyond: no step is sampled
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(hooked()));
}

void BM_HookedSampled(benchmark::State& state) {
  fp8scope_step(std::uint64_t{1} << 62);  // the start step: sampled (every step from there)
  problem().run(hooked());                // the first sampled call sets up the staging buffer
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(hooked()));
}

// Warm-up and registration order matter: direct first, signature mode before the API is used.
BENCHMARK(BM_DirectCall)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedUnsampledStepsFromSignature)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedUnsampledStepsFromApi)->Repetitions(5)->ReportAggregatesOnly(true);
// Bounded: 20,000 samples fit the ring and the staging buffer, so every one is really staged.
BENCHMARK(BM_HookedSampled)->Iterations(20000)->Repetitions(3)->ReportAggregatesOnly(true);

// Re-runs this program with the hook preloaded, unless it already is.
void preload_hook(char** argv) {
  if (std::getenv("FP8SCOPE_BENCH_PRELOADED") != nullptr) return;
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back(std::string("LD_PRELOAD=") + FP8SCOPE_HOOK_PATH);
  env.push_back("FP8SCOPE_SHIPPER=/bin/true");
  env.push_back("FP8SCOPE_START_STEP=4611686018427387904");
  env.push_back("FP8SCOPE_EVERY=1");
  env.push_back("FP8SCOPE_RING_BYTES=268435456");  // every staged sample of the run fits
  env.push_back("FP8SCOPE_BENCH_PRELOADED=1");
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  execve("/proc/self/exe", argv, envp.data());
  std::perror("hook_call_bench: re-exec with the hook preloaded");
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  preload_hook(argv);
  if (dlsym(RTLD_DEFAULT, "fp8scope_hook_api_version") == nullptr) {
    std::fprintf(stderr, "hook_call_bench: the hook is not loaded\n");
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
