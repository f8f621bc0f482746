// What the hook costs the calling thread, against the same cublasLtMatmul called directly in the
// same run (the cuBLASLt CPU fixture on a 1x1x1 problem, so the GEMM itself is nearly free):
//  - an unsampled call, with steps from fp8scope_step (target: <= 100 ns added, median), and with
//    steps from the first GEMM's signature (four descriptor reads more);
//  - a sampled call, excluding the copy (the fixture's copies are 4-byte memcpys; target <= 10 us);
//  - a sampled block-scaled call, MXFP8 (E4M3 codes with VEC32_UE8M0 scales) and NVFP4 (E2M1 with
//    VEC16_UE4M3 scales and alpha), 16 x 16 x 32: codes and scale tensors copied, about 2 KiB in
//    all (target <= 10 us added), against the same block-scaled call made directly;
//  - a grouped BF16 call (cuBLASLt grouped layouts, 8 experts of 16 x 16 x 32, shapes in device
//    arrays, as TE's grouped GEMM issues it): unsampled (target: what an unsampled dense call
//    adds), and sampled, every expert's two operands gathered by the gather kernel (16 samples);
//    and the same in MXFP8 (E4M3 codes, each group's VEC32_UE8M0 scale tensor through a device
//    array of pointers, gathered by the second kernel after its codes);
//  - a Transformer Engine cast (nvte_quantize_v2 of the TE stand-in, tests/fixtures/te/, BF16 16 x 32
//    into E4M3 under delayed scaling): unsampled (target: tens of ns added), and sampled, its input
//    and scalars copied into the cast stash on the calling thread (target <= 10 us added), against
//    the library's own nvte_quantize_v2 called directly;
//  - a CUDA graph of 8 such fp32 GEMMs replayed (cuGraphLaunch of the driver fixture, which runs
//    the graph's nodes on the calling thread): captured and launched under the hook at a step
//    nobody samples (target: the hook's recorded nodes return at once; "nodes_added", one per
//    selectable operand), and sampled (every operand copied and published after the replay),
//    against the same graph captured and launched without the hook.
// Each hooked run reports "added_ns": its median less the median of its direct call.
// The binary runs itself again with LD_PRELOAD=libfp8scope_hook.so so the hook interposes exactly
// as in a training job, and is itself the shipper the hook starts: a drainer that frees each record
// as it is published (no network, a poll a millisecond), so the ring is reused as a shipper keeps
// it in a job; each sampled benchmark first fills the ring once, untimed (a ring's first pass
// writes every page for the first time).
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fp8scope/shm/shm_ring.h"
#include "median_reporter.h"

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
  cublasStatus_t run(MatmulFn f, CUstream stream = nullptr) {
    return f(handle, desc, &one, &x, a, &y, b, &zero, &out, d, &out, d, nullptr, nullptr, 0, stream);
  }
};

Problem& problem() {
  static Problem p;
  return p;
}

// A block-scaled TN fprop as TE issues it, 16 x 16 x 32: A = W and B = X, each 16 rows of K = 32
// codes with their scale tensor in cuBLAS's 128 x 4 tiles (512 bytes each), D in fp32. The
// fixture's device memory is host memory.
struct BlockProblem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<std::uint8_t> a_codes, b_codes, a_scales, b_scales;
  std::vector<float> out = std::vector<float>(16 * 16);
  float one = 1.0f, zero = 0.0f;

  BlockProblem(cudaDataType codes, std::int32_t mode, std::uint8_t code_byte, std::uint8_t scale_byte) {
    const std::size_t code_bytes = codes == CUDA_R_4F_E2M1 ? 16 * 32 / 2 : 16 * 32;
    a_codes.assign(code_bytes, code_byte);
    b_codes.assign(code_bytes, code_byte);
    a_scales.assign(512, scale_byte);
    b_scales.assign(512, scale_byte);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const std::int32_t t = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    const void* sa = a_scales.data();
    const void* sb = b_scales.data();
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
    cublasLtMatrixLayoutCreate(&a, codes, 32, 16, 32);
    cublasLtMatrixLayoutCreate(&b, codes, 32, 16, 32);
    cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, 16, 16, 16);
  }
  cublasStatus_t run(MatmulFn f) {
    return f(problem().handle, desc, &one, a_codes.data(), a, b_codes.data(), b, &zero, out.data(), d, out.data(), d,
             nullptr, nullptr, 0, nullptr);
  }
};

BlockProblem& mxfp8() {  // E4M3 1.0 codes, E8M0 scale 2^0
  static BlockProblem p(CUDA_R_8F_E4M3, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, 0x38, 127);
  return p;
}

BlockProblem& nvfp4() {  // E2M1 1.0 codes two a byte, UE4M3 scale 1.0
  static BlockProblem p(CUDA_R_4F_E2M1, CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, 0x22, 0x38);
  return p;
}

// cuBLASLt's grouped API (cuBLAS 13.2+, not in the installed headers), as the fixture implements it.
extern "C" cublasStatus_t cublasLtGroupedMatrixLayoutCreate(cublasLtMatrixLayout_t*, cudaDataType, int, const void*,
                                                            const void*, const void*);

constexpr int kExperts = 8;

// A grouped fprop of kExperts experts, W [16, 32] and X [16 tokens, 32] each, in BF16 (every value
// 1) or MXFP8 (E4M3 1.0, every E8M0 scale 1): pointer arrays and int32 shape arrays, "device"
// memory being host memory in the fixtures.
struct GroupedProblem {
  static constexpr std::size_t kValues = 16 * 32, kScaleBytes = 128 * 4;  // per matrix; 128x4 tiles
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<std::uint8_t> w, x, scales;
  std::vector<float> out = std::vector<float>(kExperts * 16 * 16);
  std::vector<const void*> w_ptrs, x_ptrs, scale_ptrs;
  std::vector<void*> out_ptrs;
  std::vector<std::int32_t> k = std::vector<std::int32_t>(kExperts, 32), n16 = std::vector<std::int32_t>(kExperts, 16);
  float one = 1.0f, zero = 0.0f;
  const void* scale_array = nullptr;

  explicit GroupedProblem(bool mxfp8) {
    const std::size_t bytes = mxfp8 ? 1 : 2;
    for (std::vector<std::uint8_t>* m : {&w, &x}) {
      m->resize(kExperts * kValues * bytes);
      for (std::size_t i = 0; i < m->size(); ++i) (*m)[i] = mxfp8 ? 0x38 : (i % 2 == 0 ? 0x80 : 0x3F);
    }
    scales.assign(kExperts * kScaleBytes, 127);
    for (int e = 0; e < kExperts; ++e) {
      w_ptrs.push_back(w.data() + e * kValues * bytes);
      x_ptrs.push_back(x.data() + e * kValues * bytes);
      scale_ptrs.push_back(scales.data() + e * kScaleBytes);
      out_ptrs.push_back(out.data() + e * 16 * 16);
    }
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const std::int32_t t = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    const cudaDataType type = mxfp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    if (mxfp8) {
      const std::int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
      scale_array = scale_ptrs.data();
      for (auto [mode_attr, pointer_attr] : {std::pair{CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER},
                                             std::pair{CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER}}) {
        cublasLtMatmulDescSetAttribute(desc, mode_attr, &mode, sizeof mode);
        cublasLtMatmulDescSetAttribute(desc, pointer_attr, &scale_array, sizeof scale_array);
      }
    }
    cublasLtGroupedMatrixLayoutCreate(&a, type, kExperts, k.data(), n16.data(), k.data());
    cublasLtGroupedMatrixLayoutCreate(&b, type, kExperts, k.data(), n16.data(), k.data());
    cublasLtGroupedMatrixLayoutCreate(&d, CUDA_R_32F, kExperts, n16.data(), n16.data(), n16.data());
  }
  cublasStatus_t run(MatmulFn f) {
    return f(problem().handle, desc, &one, w_ptrs.data(), a, x_ptrs.data(), b, &zero, out_ptrs.data(), d,
             out_ptrs.data(), d, nullptr, nullptr, 0, nullptr);
  }
};

GroupedProblem& grouped() {
  static GroupedProblem p(false);
  return p;
}
GroupedProblem& grouped_mxfp8() {
  static GroupedProblem p(true);
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

// One TE cast as TE's extension makes it (te_fixture_api.h, TE 2.20's ABI), its tensors built once:
// BF16 16 x 32 into E4M3 rows and its transposed copy under delayed scaling (scale and amax).
struct TeCast {
  using QuantizeFn = void (*)(void*, void*, void*, CUstream);
  void* library = nullptr;
  QuantizeFn direct = nullptr, hooked = nullptr;
  void *input = nullptr, *output = nullptr, *config = nullptr;
  std::vector<std::uint16_t> x = std::vector<std::uint16_t>(16 * 32, 0x3F80);  // 1.0 in BF16
  std::vector<std::uint8_t> codes = std::vector<std::uint8_t>(16 * 32), transposed = std::vector<std::uint8_t>(16 * 32);
  float scale = 448.0f, scale_inv = 0.0f, transposed_scale_inv = 0.0f, amax = 0.0f;

  TeCast() {
    library = dlopen(FP8SCOPE_TE_LIBRARY, RTLD_NOW | RTLD_GLOBAL);  // as TE's package loads it
    if (library == nullptr) return;
    direct = reinterpret_cast<QuantizeFn>(dlsym(library, "nvte_quantize_v2"));
    hooked = reinterpret_cast<QuantizeFn>(dlsym(RTLD_DEFAULT, "nvte_quantize_v2"));  // the hook's
    const auto create = reinterpret_cast<void* (*)(int)>(dlsym(library, "nvte_create_tensor"));
    const auto set = reinterpret_cast<void (*)(void**, int, const void*)>(dlsym(library, "nvte_set_tensor_param"));
    const auto make_shape = reinterpret_cast<Shape (*)(const size_t*, size_t)>(dlsym(library, "nvte_make_shape"));
    const auto create_config = reinterpret_cast<void* (*)()>(dlsym(library, "nvte_create_quantization_config"));
    const auto param = [&](void** t, int which, void* ptr, int dtype, std::vector<size_t> dims) {
      Basic b{ptr, dtype, make_shape(dims.data(), dims.size())};
      set(t, which, &b);
    };
    input = create(0);
    param(&input, 0, x.data(), 6, {16, 32});
    output = create(0);
    param(&output, 0, codes.data(), 7, {16, 32});
    param(&output, 1, transposed.data(), 7, {32, 16});
    param(&output, 2, &scale, 4, {1});
    param(&output, 3, &amax, 4, {1});
    param(&output, 4, &scale_inv, 4, {1});
    param(&output, 5, &transposed_scale_inv, 4, {1});
    config = create_config();
  }
  void run(QuantizeFn f) { f(input, output, config, nullptr); }

 private:
  struct Shape {
    size_t data[15];
    size_t ndim;
  };
  struct Basic {
    void* ptr;
    int dtype;
    Shape shape;
  };
};

TeCast& te_cast() {
  static TeCast c;
  return c;
}

// A step of kGraphGemms fp32 GEMMs (the 1x1x1 problem) captured into a CUDA graph on a stream of
// its own: through the hook (the PLT's capture and launch calls, the hooked cublasLtMatmul) or
// around it (the driver fixture's and cuBLASLt fixture's own entry points).
constexpr int kGraphGemms = 8;
struct GraphStep {
  template <class F>
  static F driver(const char* name, bool hooked) {
    static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return reinterpret_cast<F>(dlsym(hooked ? RTLD_DEFAULT : lib, name));
  }
  CUstream stream = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  decltype(&cuGraphLaunch) launch = nullptr;
  std::size_t nodes = 0;

  explicit GraphStep(bool hooked) {
    problem();
    cuStreamCreate(&stream, 0);
    launch = driver<decltype(&cuGraphLaunch)>("cuGraphLaunch", hooked);
    driver<decltype(&cuStreamBeginCapture)>("cuStreamBeginCapture_v2", hooked)(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    for (int i = 0; i < kGraphGemms; ++i) problem().run(hooked ? ::hooked() : direct(), stream);
    driver<decltype(&cuStreamEndCapture)>("cuStreamEndCapture", hooked)(stream, &graph);
    driver<decltype(&cuGraphInstantiate)>("cuGraphInstantiateWithFlags", hooked)(&exec, graph, 0);
    if (graph != nullptr) cuGraphGetNodes(graph, nullptr, &nodes);
  }
  CUresult replay() {
    const CUresult r = launch(exec, stream);
    return r == CUDA_SUCCESS ? cuStreamSynchronize(stream) : r;
  }
};

void fp8scope_step(std::uint64_t step) {
  static auto f = reinterpret_cast<void (*)(std::uint64_t)>(dlsym(RTLD_DEFAULT, "fp8scope_step"));
  if (f != nullptr) f(step);
}

void BM_DirectCall(benchmark::State& state) {
  problem().run(hooked());  // the hook's first call sets up the shared ring and starts the shipper: not timed
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(direct()));
}

void direct_block_call(benchmark::State& state, BlockProblem& p) {
  if (p.run(direct()) != CUBLAS_STATUS_SUCCESS) state.SkipWithError("the fixture refused the block-scaled call");
  for (auto _ : state) benchmark::DoNotOptimize(p.run(direct()));
}
void BM_DirectCallMxfp8(benchmark::State& state) { direct_block_call(state, mxfp8()); }
void direct_grouped_call(benchmark::State& state, GroupedProblem& p) {
  if (p.run(direct()) != CUBLAS_STATUS_SUCCESS) state.SkipWithError("the fixture refused the grouped call");
  for (auto _ : state) benchmark::DoNotOptimize(p.run(direct()));
}
void BM_DirectCallGrouped(benchmark::State& state) { direct_grouped_call(state, grouped()); }
void BM_DirectCallGroupedMxfp8(benchmark::State& state) { direct_grouped_call(state, grouped_mxfp8()); }
void BM_DirectCallNvfp4(benchmark::State& state) { direct_block_call(state, nvfp4()); }
void BM_DirectCallTeCast(benchmark::State& state) {
  TeCast& c = te_cast();
  if (c.direct == nullptr) return state.SkipWithError("no TE stand-in at " FP8SCOPE_TE_LIBRARY);
  for (auto _ : state) c.run(c.direct);
}

// Must run before anything calls fp8scope_step (the C API then becomes the step source for good).
void BM_HookedUnsampledStepsFromSignature(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(hooked()));
}

void BM_HookedUnsampledStepsFromApi(benchmark::State& state) {
  fp8scope_step(1);  // FP8SCOPE_START_STEP is far beyond: no step is sampled
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(hooked()));
}

void BM_HookedUnsampledGrouped(benchmark::State& state) {
  fp8scope_step(1);
  for (auto _ : state) benchmark::DoNotOptimize(grouped().run(hooked()));
}

void BM_HookedUnsampledTeCast(benchmark::State& state) {
  fp8scope_step(1);
  TeCast& c = te_cast();
  if (c.hooked == nullptr || c.hooked == c.direct) return state.SkipWithError("the hook does not interpose nvte_quantize_v2");
  for (auto _ : state) c.run(c.hooked);
}

GraphStep& direct_graph() {
  static GraphStep step(false);
  return step;
}

void BM_DirectCallGraphReplay(benchmark::State& state) {
  GraphStep& step = direct_graph();
  if (step.exec == nullptr || step.replay() != CUDA_SUCCESS) return state.SkipWithError("the fixture's graph did not run");
  for (auto _ : state) benchmark::DoNotOptimize(step.replay());
  state.counters["nodes"] = static_cast<double>(step.nodes);
}

// The hook's graph, captured at a step (1) before the start step, so the capture records and no
// replay samples; the sampled benchmark replays it from the start step on.
GraphStep& hooked_graph() {
  static GraphStep step(true);
  return step;
}

void count_added_nodes(benchmark::State& state) {
  state.counters["nodes_added"] = static_cast<double>(hooked_graph().nodes) - static_cast<double>(direct_graph().nodes);
}

void BM_HookedUnsampledGraphReplay(benchmark::State& state) {
  fp8scope_step(1);
  GraphStep& step = hooked_graph();
  if (step.exec == nullptr || step.replay() != CUDA_SUCCESS) return state.SkipWithError("the hooked graph did not run");
  for (auto _ : state) benchmark::DoNotOptimize(step.replay());
  count_added_nodes(state);
}

// Untimed: sampled calls that write the whole ring once (kRingBytes, below), so the timed calls
// write pages the ring has used before, as in a job past its first sampled steps.
constexpr std::uint64_t kRingBytes = 8 << 20;
template <class Call>
void fill_ring_once(std::uint64_t bytes_per_call, Call call) {
  for (std::uint64_t written = 0; written < kRingBytes; written += bytes_per_call) call();
}

void BM_HookedSampled(benchmark::State& state) {
  fp8scope_step(std::uint64_t{1} << 62);  // the start step: sampled (every step from there)
  fill_ring_once(2 * fp8scope::shm::round_up(sizeof(fp8scope::shm::RecordHeader) + 4), [] { problem().run(hooked()); });
  for (auto _ : state) benchmark::DoNotOptimize(problem().run(hooked()));
}

void hooked_block_call(benchmark::State& state, BlockProblem& p) {
  fp8scope_step(std::uint64_t{1} << 62);
  if (p.run(hooked()) != CUBLAS_STATUS_SUCCESS) state.SkipWithError("the block-scaled call failed under the hook");
  // Two records of at most 512 bytes of codes and 512 of scales each.
  fill_ring_once(2 * fp8scope::shm::round_up(sizeof(fp8scope::shm::RecordHeader) + 1024), [&] { p.run(hooked()); });
  for (auto _ : state) benchmark::DoNotOptimize(p.run(hooked()));
}
void BM_HookedSampledMxfp8(benchmark::State& state) { hooked_block_call(state, mxfp8()); }
void BM_HookedSampledNvfp4(benchmark::State& state) { hooked_block_call(state, nvfp4()); }

void hooked_grouped_call(benchmark::State& state, GroupedProblem& p) {
  fp8scope_step(std::uint64_t{1} << 62);
  if (p.run(hooked()) != CUBLAS_STATUS_SUCCESS) state.SkipWithError("the grouped call failed under the hook");
  // 16 records of one expert's matrix (1 KiB at most), its scales and 8 token counts each.
  fill_ring_once(2 * kExperts * fp8scope::shm::round_up(sizeof(fp8scope::shm::RecordHeader) + 1024 +
                                                        GroupedProblem::kScaleBytes + 8 * kExperts),
                 [&] { p.run(hooked()); });
  for (auto _ : state) benchmark::DoNotOptimize(p.run(hooked()));
  state.counters["samples_per_call"] = 2 * kExperts;
}
void BM_HookedSampledGrouped(benchmark::State& state) { hooked_grouped_call(state, grouped()); }
void BM_HookedSampledGroupedMxfp8(benchmark::State& state) { hooked_grouped_call(state, grouped_mxfp8()); }

// Each sampled cast copies its input (1 KiB) and scalars into the cast stash, where the next cast
// of the same output supersedes it: no GEMM reads them, so no record is written.
void BM_HookedSampledTeCast(benchmark::State& state) {
  fp8scope_step(std::uint64_t{1} << 62);
  TeCast& c = te_cast();
  if (c.hooked == nullptr || c.hooked == c.direct) return state.SkipWithError("the hook does not interpose nvte_quantize_v2");
  for (auto _ : state) c.run(c.hooked);
}

// Each replay samples its 16 operands: the plan written before it, the copies made by its nodes,
// the records published after it, on the publisher thread.
void BM_HookedSampledGraphReplay(benchmark::State& state) {
  GraphStep& step = hooked_graph();
  std::uint64_t n = std::uint64_t{1} << 62;
  fp8scope_step(n);
  if (step.exec == nullptr || step.replay() != CUDA_SUCCESS) return state.SkipWithError("the hooked graph did not run");
  fill_ring_once(2 * kGraphGemms * fp8scope::shm::round_up(sizeof(fp8scope::shm::RecordHeader) + 4), [&] {
    fp8scope_step(++n);
    step.replay();
  });
  for (auto _ : state) {
    fp8scope_step(++n);
    benchmark::DoNotOptimize(step.replay());
  }
  state.counters["samples_per_replay"] = 2 * kGraphGemms;
}

// Adds "added_ns" to each hooked run: its median less its direct call's median, same run.
std::map<std::string, double> g_direct_ns;  // "" (fp32), "Mxfp8", "Nvfp4", "Grouped", "GroupedMxfp8", "TeCast", "GraphReplay"

void added_time(const std::string& name, double seconds, benchmark::UserCounters& counters) {
  const double ns = seconds * 1e9;
  const std::string family = name.substr(0, name.find('/'));
  std::string kind;  // the direct call a hooked one is held to
  for (const char* k : {"Mxfp8", "Nvfp4", "Grouped", "GroupedMxfp8", "TeCast", "GraphReplay"}) {  // the longest suffix last
    if (family.ends_with(k)) kind = k;
  }
  if (family.rfind("BM_DirectCall", 0) == 0) g_direct_ns[kind] = ns;
  if (family.rfind("BM_Hooked", 0) == 0 && g_direct_ns.count(kind)) counters["added_ns"] = ns - g_direct_ns[kind];
}

// Warm-up and registration order matter: direct first, signature mode before the API is used.
BENCHMARK(BM_DirectCall)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_DirectCallMxfp8)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_DirectCallNvfp4)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_DirectCallGrouped)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_DirectCallGroupedMxfp8)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_DirectCallTeCast)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_DirectCallGraphReplay)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedUnsampledStepsFromSignature)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedUnsampledStepsFromApi)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedUnsampledGrouped)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedUnsampledTeCast)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedUnsampledGraphReplay)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedSampled)->Iterations(20000)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedSampledMxfp8)->Iterations(4000)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedSampledNvfp4)->Iterations(4000)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedSampledGrouped)->Iterations(2000)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedSampledGroupedMxfp8)->Iterations(2000)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedSampledTeCast)->Iterations(20000)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedSampledGraphReplay)->Iterations(2000)->Repetitions(3)->ReportAggregatesOnly(true);

// Started by the hook as its shipper (the ring's fd in FP8SCOPE_SHM_FD): frees every record as it
// is published, until the benchmark process is gone.
int drain_ring(const char* fd_text) {
  const int fd = std::atoi(fd_text);
  struct stat st {};
  if (fstat(fd, &st) != 0) return 2;
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED || !fp8scope::shm::valid(base, bytes)) return 2;
  fp8scope::shm::RingReader reader(static_cast<fp8scope::shm::Header*>(base));
  const pid_t parent = getppid();
  while (getppid() == parent) {
    const fp8scope::shm::RecordHeader* r = nullptr;
    while (reader.next(&r) == fp8scope::shm::RingReader::Next::kRecord) reader.release(r);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

// Re-runs this program with the hook preloaded, unless it already is.
void preload_hook(char** argv) {
  if (std::getenv("FP8SCOPE_BENCH_PRELOADED") != nullptr) return;
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back(std::string("LD_PRELOAD=") + FP8SCOPE_HOOK_PATH);
  env.push_back("FP8SCOPE_SHIPPER=/proc/self/exe");  // this program, as the drainer
  env.push_back("FP8SCOPE_START_STEP=4611686018427387904");
  env.push_back("FP8SCOPE_EVERY=1");
  env.push_back("FP8SCOPE_RING_BYTES=" + std::to_string(kRingBytes));
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
  if (const char* fd = std::getenv(fp8scope::shm::kShmFdEnv)) return drain_ring(fd);
  preload_hook(argv);
  if (dlsym(RTLD_DEFAULT, "fp8scope_hook_api_version") == nullptr) {
    std::fprintf(stderr, "hook_call_bench: the hook is not loaded\n");
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  fp8scope::bench::MedianReporter reporter(added_time);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
