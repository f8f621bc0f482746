// The CUDA engine: copies a sample to its device buffer, runs pass 1 (moments, block amaxes),
// derives the scales with the shared rules, runs pass 2 (every spec's cast in one read), and merges
// the per-block partial results on the host in block order.
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "fp8scope/cuda_engine.h"
#include "fp8scope/scale_rules.h"
#include "stats_kernels.cuh"

namespace fp8scope {
namespace {

Status cuda_error(cudaError_t e, const char* what) {
  return Status::error(std::string("cuda engine: ") + what + ": " + cudaGetErrorString(e));
}

#define FP8SCOPE_CUDA_TRY(call, what)                   \
  do {                                                  \
    const cudaError_t fp8scope_e = (call);              \
    if (fp8scope_e != cudaSuccess) return cuda_error(fp8scope_e, what); \
  } while (0)

// A device allocation that only grows, within the engine's budget.
class DeviceBuffer {
 public:
  ~DeviceBuffer() { cudaFree(ptr_); }
  Status reserve(std::size_t bytes, std::uint64_t* budget_left) {
    if (bytes <= size_) return Status();
    if (bytes - size_ > *budget_left) return Status::error("cuda engine: the GPU memory budget is too small for this sample");
    cudaFree(ptr_);
    ptr_ = nullptr;
    *budget_left += size_;
    size_ = 0;
    FP8SCOPE_CUDA_TRY(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    size_ = bytes;
    *budget_left -= bytes;
    return Status();
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

class CudaEngine final : public StatsEngine {
 public:
  CudaEngine(int device, std::uint64_t budget) : device_(device), budget_left_(budget) {}
  ~CudaEngine() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status init() {
    FP8SCOPE_CUDA_TRY(cudaSetDevice(device_), "cudaSetDevice");
    FP8SCOPE_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaDeviceProp prop{};
    FP8SCOPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    blocks_ = prop.multiProcessorCount * 8;
    name_ = std::string("cuda:") + std::to_string(device_);
    return Status();
  }

  const char* name() const override { return name_.c_str(); }

  Status analyze(const TensorView& t, std::span<const QuantSpec> specs, TensorAnalysis* out) override {
    if (Status s = check_analysis_request(t, specs); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);  // one sample at a time on this device
    FP8SCOPE_CUDA_TRY(cudaSetDevice(device_), "cudaSetDevice");
    const std::size_t bytes = static_cast<std::size_t>(
        tensor_bytes(t.dtype, static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols)));
    const int grid = static_cast<int>(std::min<std::int64_t>(blocks_, ceil_div(t.numel(), cuda::kThreads)));

    // Block amaxes and scales need room per spec: one float per block, twice.
    std::size_t block_floats = 0;
    std::vector<std::int64_t> blocks_per_row(specs.size()), blocks(specs.size()), offset(specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) {
      if (!specs[k].per_block()) continue;
      blocks_per_row[k] = ceil_div(t.cols, specs[k].block_cols);
      blocks[k] = ceil_div(t.rows, specs[k].block_rows) * blocks_per_row[k];
      offset[k] = static_cast<std::int64_t>(block_floats);
      block_floats += static_cast<std::size_t>(blocks[k]) * 3;  // amax, scale, scale_inv
    }
    const std::size_t partial_bytes =
        std::max(sizeof(TensorMoments) * grid, sizeof(QuantStats) * grid * std::max<std::size_t>(specs.size(), 1));
    if (Status s = input_.reserve(bytes, &budget_left_); !s.ok()) return s;
    if (Status s = scales_.reserve(std::max<std::size_t>(block_floats, 1) * sizeof(float), &budget_left_); !s.ok()) return s;
    if (Status s = partial_.reserve(partial_bytes, &budget_left_); !s.ok()) return s;

    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(input_.as<void>(), t.data, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");

    // Pass 1: moments and block amaxes.
    cuda::moments_kernel<<<grid, cuda::kThreads, 0, stream_>>>(input_.as<void>(), t.dtype, t.scale_inv, t.numel(),
                                                               partial_.as<TensorMoments>());
    std::vector<TensorMoments> moments(static_cast<std::size_t>(grid));
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(moments.data(), partial_.as<void>(), sizeof(TensorMoments) * grid,
                                      cudaMemcpyDeviceToHost, stream_),
                      "copy moments");
    cuda::SpecTable table;
    table.count = static_cast<int>(specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) {
      cuda::SpecScales& sp = table.spec[k];
      sp.spec = specs[k];
      if (!specs[k].per_block()) continue;
      float* amax = scales_.as<float>() + offset[k];
      sp.scale = amax + blocks[k];
      sp.scale_inv = amax + 2 * blocks[k];
      sp.blocks_per_row = blocks_per_row[k];
      cuda::block_amax_kernel<<<static_cast<unsigned>(blocks[k]), cuda::kThreads, 0, stream_>>>(
          input_.as<void>(), t.dtype, t.scale_inv, t.rows, t.cols, specs[k].block_rows, specs[k].block_cols,
          blocks_per_row[k], amax);
    }
    FP8SCOPE_CUDA_TRY(cudaStreamSynchronize(stream_), "pass 1");
    out->moments = TensorMoments{};
    for (const TensorMoments& m : moments) merge(out->moments, m);
    out->te_amax = te_amax(out->moments.amax, out->moments.inf > 0);

    // Scales, by the rules the CPU engine applies (NVFP4's need the tensor's amax).
    for (std::size_t k = 0; k < specs.size(); ++k) {
      cuda::SpecScales& sp = table.spec[k];
      const BlockRule rule = block_rule_for(specs[k], out->te_amax);
      if (specs[k].per_block()) {
        cuda::block_scales_kernel<<<static_cast<unsigned>(ceil_div(blocks[k], cuda::kThreads)), cuda::kThreads, 0,
                                    stream_>>>(rule, scales_.as<float>() + offset[k], blocks[k],
                                               const_cast<float*>(sp.scale), const_cast<float*>(sp.scale_inv));
        continue;
      }
      const ScalePair p = specs[k].rule == ScaleRule::kTensorFixed
                              ? ScalePair{specs[k].fixed_scale, 1.0f / specs[k].fixed_scale}
                              : current_block_scale(rule, out->te_amax);
      sp.tensor_scale = p.scale;
      sp.tensor_scale_inv = p.scale_inv;
    }

    // Pass 2.
    out->quant.assign(specs.size(), QuantStats{});
    if (!specs.empty()) {
      cuda::quantize_kernel<<<grid, cuda::kThreads, 0, stream_>>>(input_.as<void>(), t.dtype, t.scale_inv, t.rows,
                                                                  t.cols, table, partial_.as<QuantStats>());
      std::vector<QuantStats> partial(static_cast<std::size_t>(grid) * specs.size());
      FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(partial.data(), partial_.as<void>(), sizeof(QuantStats) * partial.size(),
                                        cudaMemcpyDeviceToHost, stream_),
                        "copy quantization results");
      std::vector<float> block_scales(block_floats);
      if (block_floats > 0) {
        FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(block_scales.data(), scales_.as<void>(), block_floats * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_),
                          "copy block scales");
      }
      FP8SCOPE_CUDA_TRY(cudaStreamSynchronize(stream_), "pass 2");
      for (std::size_t k = 0; k < specs.size(); ++k) {
        QuantStats& q = out->quant[k];
        for (int b = 0; b < grid; ++b) merge(q, partial[static_cast<std::size_t>(b) * specs.size() + k]);
        if (!specs[k].per_block()) {
          q.scale_min = q.scale_max = table.spec[k].tensor_scale;
          continue;
        }
        q.scale_min = kFloatMax;
        q.scale_max = 0.0f;
        const float* s = block_scales.data() + offset[k] + blocks[k];
        for (std::int64_t b = 0; b < blocks[k]; ++b) {
          q.scale_min = std::min(q.scale_min, s[b]);
          q.scale_max = std::max(q.scale_max, s[b]);
        }
      }
    }
    FP8SCOPE_CUDA_TRY(cudaGetLastError(), "kernel launch");
    return Status();
  }

 private:
  int device_;
  std::uint64_t budget_left_;
  int blocks_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;
  DeviceBuffer input_, scales_, partial_;
};

Result<std::unique_ptr<StatsEngine>> create_engine(int device, std::uint64_t budget) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return cuda_error(e, "no usable CUDA driver");
  if (device < 0 || device >= count) {
    return Status::error("cuda engine: expected a device index below " + std::to_string(count) + ", got " +
                         std::to_string(device));
  }
  auto engine = std::make_unique<CudaEngine>(device, budget);
  if (Status s = engine->init(); !s.ok()) return s;
  return std::unique_ptr<StatsEngine>(std::move(engine));
}

}  // namespace

}  // namespace fp8scope

// The plugin's entry point (cuda_plugin.h): an engine, or null and the reason in `error`.
extern "C" __attribute__((visibility("default"))) fp8scope::StatsEngine* fp8scope_cuda_engine_create(
    int device, std::uint64_t memory_budget_bytes, char* error, std::size_t error_size) {
  auto engine = fp8scope::create_engine(device, memory_budget_bytes);
  if (!engine.ok()) {
    std::snprintf(error, error_size, "%s", engine.message().c_str());
    return nullptr;
  }
  return std::move(engine).value().release();
}
