// The CUDA engine: the shared two-pass driver (two_pass_driver.h) over CUDA kernels on one device.
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "fp8scope/kernels/cuda_engine.h"
#include "fp8scope/kernels/scale_rules.h"
#include "fp8scope/kernels/two_pass_driver.h"
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

// The CUDA engine's passes (two_pass_driver.h): the sample is copied to the device once; pass 1
// computes per-CUDA-block moments and every block spec's amax table (all block specs are tabled),
// the scales come from block_scales_kernel, and pass 2 casts every spec in one read. Partial
// results are merged on the host in block order.
class CudaPasses final : public TwoPassBackend {
 public:
  CudaPasses(cudaStream_t stream, int max_grid, DeviceBuffer& input, DeviceBuffer& tables, DeviceBuffer& partial,
             std::uint64_t* budget_left)
      : stream_(stream), max_grid_(max_grid), input_(input), tables_(tables), partial_(partial),
        budget_left_(budget_left) {}

  RowBlocks row_blocks() const override { return RowBlocks::kTabled; }

  Status first_pass(const TensorView& t, const AnalysisPlan& plan, TensorMoments* moments,
                    std::span<float> channel_amax) override {
    const std::size_t bytes = static_cast<std::size_t>(
        tensor_bytes(t.dtype, static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols)));
    grid_ = static_cast<int>(std::min<std::int64_t>(max_grid_, ceil_div(t.numel(), cuda::kThreads)));
    const std::size_t partial_bytes = std::max(
        sizeof(TensorMoments) * grid_, sizeof(QuantStats) * grid_ * std::max<std::size_t>(plan.specs.size(), 1));
    if (Status s = input_.reserve(bytes, budget_left_); !s.ok()) return s;
    // The channel amaxes follow the block tables, then the row amaxes of row-scaled specs.
    const std::size_t channels = static_cast<std::size_t>(plan.channel_count);
    row_amax_at_ = plan.row_amax ? plan.table_floats + channels : 0;
    const std::size_t rows = plan.row_amax ? static_cast<std::size_t>(t.rows) : 0;
    if (Status s = tables_.reserve(std::max<std::size_t>(plan.table_floats + channels + rows, 1) * sizeof(float),
                                   budget_left_);
        !s.ok()) {
      return s;
    }
    if (Status s = partial_.reserve(partial_bytes, budget_left_); !s.ok()) return s;
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(input_.as<void>(), t.data, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");

    cuda::moments_kernel<<<grid_, cuda::kThreads, 0, stream_>>>(input_.as<void>(), t.dtype, t.scale_inv, t.numel(),
                                                                partial_.as<TensorMoments>());
    std::vector<TensorMoments> partial(static_cast<std::size_t>(grid_));
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(partial.data(), partial_.as<void>(), sizeof(TensorMoments) * grid_,
                                      cudaMemcpyDeviceToHost, stream_),
                      "copy moments");
    for (const SpecPlan& p : plan.specs) {
      if (!p.tabled) continue;
      cuda::block_amax_kernel<<<static_cast<unsigned>(p.block_count), cuda::kThreads, 0, stream_>>>(
          input_.as<void>(), t.dtype, t.scale_inv, t.rows, t.cols, p.spec.block_rows, p.spec.block_cols,
          p.blocks_per_row, tables_.as<float>() + p.amax_at());
    }
    if (channels > 0) {
      // A channel is a block one column by every row, or one row by every column.
      const bool columns = plan.channels == ChannelAxis::kColumns;
      float* channel_table = tables_.as<float>() + plan.table_floats;
      cuda::block_amax_kernel<<<static_cast<unsigned>(channels), cuda::kThreads, 0, stream_>>>(
          input_.as<void>(), t.dtype, t.scale_inv, t.rows, t.cols, columns ? static_cast<int>(t.rows) : 1,
          columns ? 1 : static_cast<int>(t.cols), columns ? t.cols : 1, channel_table);
      FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(channel_amax.data(), channel_table, channels * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_),
                        "copy channel amax");
    }
    if (rows > 0) {  // each row a block of one row by every column
      cuda::block_amax_kernel<<<static_cast<unsigned>(rows), cuda::kThreads, 0, stream_>>>(
          input_.as<void>(), t.dtype, t.scale_inv, t.rows, t.cols, 1, static_cast<int>(t.cols), 1,
          tables_.as<float>() + row_amax_at_);
    }
    tensor_ = t;
    FP8SCOPE_CUDA_TRY(cudaStreamSynchronize(stream_), "pass 1");
    for (const TensorMoments& m : partial) merge(*moments, m);
    return Status();
  }

  Status block_scales(const AnalysisPlan& plan) override {
    for (const SpecPlan& p : plan.specs) {
      if (!p.tabled) continue;
      float* table = tables_.as<float>();
      const auto grid = static_cast<unsigned>(ceil_div(p.block_count, cuda::kThreads));
      if (p.rule.kind == BlockRule::kNvfp4FourOverSix) {
        cuda::four_over_six_kernel<<<grid, cuda::kThreads, 0, stream_>>>(
            input_.as<void>(), tensor_.dtype, tensor_.scale_inv, tensor_.rows, tensor_.cols, p.spec.block_rows,
            p.spec.block_cols, p.blocks_per_row, p.rule, table + p.amax_at(), table + p.scale_at(), table + p.scale_inv_at());
        continue;
      }
      cuda::block_scales_kernel<<<grid, cuda::kThreads, 0, stream_>>>(
          p.rule, table + p.amax_at(), p.block_count, table + p.scale_at(), table + p.scale_inv_at(),
          p.spec.row_scaled ? table + row_amax_at_ : nullptr, p.blocks_per_row);
    }
    return Status();
  }

  Status second_pass(const TensorView& t, const AnalysisPlan& plan, std::vector<QuantStats>* quant) override {
    cuda::SpecTable table;
    table.count = static_cast<int>(plan.specs.size());
    for (std::size_t k = 0; k < plan.specs.size(); ++k) {
      const SpecPlan& p = plan.specs[k];
      cuda::SpecScales& sp = table.spec[k];
      sp.spec = p.spec;
      sp.tensor_scale = p.tensor_scale.scale;
      sp.tensor_scale_inv = p.tensor_scale.scale_inv;
      if (!p.tabled) continue;
      sp.scale = tables_.as<float>() + p.scale_at();
      sp.scale_inv = tables_.as<float>() + p.scale_inv_at();
      sp.blocks_per_row = p.blocks_per_row;
    }
    cuda::quantize_kernel<<<grid_, cuda::kThreads, 0, stream_>>>(input_.as<void>(), t.dtype, t.scale_inv, t.rows,
                                                                 t.cols, table, partial_.as<QuantStats>());
    std::vector<QuantStats> partial(static_cast<std::size_t>(grid_) * plan.specs.size());
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(partial.data(), partial_.as<void>(), sizeof(QuantStats) * partial.size(),
                                      cudaMemcpyDeviceToHost, stream_),
                      "copy quantization results");
    // Only the scales come back (their range); amaxes and inverse scales stay on the device.
    host_tables_.resize(plan.table_floats);
    for (const SpecPlan& p : plan.specs) {
      if (!p.tabled) continue;
      FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(host_tables_.data() + p.scale_at(), tables_.as<float>() + p.scale_at(),
                                        static_cast<std::size_t>(p.block_count) * sizeof(float), cudaMemcpyDeviceToHost,
                                        stream_),
                        "copy block scales");
    }
    FP8SCOPE_CUDA_TRY(cudaStreamSynchronize(stream_), "pass 2");
    FP8SCOPE_CUDA_TRY(cudaGetLastError(), "kernel launch");
    for (std::size_t k = 0; k < plan.specs.size(); ++k) {
      for (int b = 0; b < grid_; ++b) merge((*quant)[k], partial[static_cast<std::size_t>(b) * plan.specs.size() + k]);
    }
    return Status();
  }

  Result<std::span<const float>> table_scales(const AnalysisPlan& plan, std::size_t k) override {
    const SpecPlan& p = plan.specs[k];
    return std::span<const float>(host_tables_.data() + p.scale_at(), static_cast<std::size_t>(p.block_count));
  }

 private:
  cudaStream_t stream_;
  int max_grid_;
  int grid_ = 0;
  DeviceBuffer &input_, &tables_, &partial_;
  std::uint64_t* budget_left_;
  std::vector<float> host_tables_;
  TensorView tensor_;             // the sample pass 1 copied to the device (its shape and dtype)
  std::size_t row_amax_at_ = 0;   // where the row amaxes start in tables_, in floats
};

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
    std::lock_guard<std::mutex> lock(mu_);  // one sample at a time on this device
    FP8SCOPE_CUDA_TRY(cudaSetDevice(device_), "cudaSetDevice");
    CudaPasses passes(stream_, blocks_, input_, tables_, partial_, &budget_left_);
    return run_two_passes(passes, t, specs, out);
  }

  // The codes and their block scales go to the device; the block scale statistics are finished on
  // the host from the blocks' amax and amin (observed_analysis.h, as the CPU does).
  Result<ObservedAnalysis> analyze_observed(const ObservedTensor& t) override {
    Result<BlockScaleGrid> scales = observed_scales(t);
    if (!scales.ok()) return scales.status();
    const BlockScaleGrid& g = scales.value();
    std::lock_guard<std::mutex> lock(mu_);
    FP8SCOPE_CUDA_TRY(cudaSetDevice(device_), "cudaSetDevice");
    const std::int64_t n = t.shape.rows * t.shape.cols;
    const std::size_t code_bytes = static_cast<std::size_t>(
        tensor_bytes(t.dtype, static_cast<std::uint64_t>(t.shape.rows), static_cast<std::uint64_t>(t.shape.cols)));
    const std::size_t count = g.scale_inv.size();
    const int grid = static_cast<int>(std::min<std::int64_t>(blocks_, ceil_div(n, cuda::kThreads)));
    if (Status s = input_.reserve(code_bytes, &budget_left_); !s.ok()) return s;
    if (Status s = tables_.reserve(3 * count * sizeof(float), &budget_left_); !s.ok()) return s;
    if (Status s = partial_.reserve((sizeof(TensorMoments) + sizeof(unsigned long long)) * grid, &budget_left_); !s.ok()) {
      return s;
    }
    float* scale_inv = tables_.as<float>();
    auto* amax_bits = reinterpret_cast<unsigned int*>(scale_inv + count);
    unsigned int* amin_bits = amax_bits + count;
    auto* moments = partial_.as<TensorMoments>();
    auto* saturated = reinterpret_cast<unsigned long long*>(moments + grid);
    const std::vector<unsigned int> no_amin(count, float_bits(kFloatMax));
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(input_.as<void>(), t.codes, code_bytes, cudaMemcpyHostToDevice, stream_), "copy codes");
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(scale_inv, g.scale_inv.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream_),
                      "copy scales");
    FP8SCOPE_CUDA_TRY(cudaMemsetAsync(amax_bits, 0, count * sizeof(unsigned int), stream_), "clear block amax");
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(amin_bits, no_amin.data(), count * sizeof(unsigned int), cudaMemcpyHostToDevice,
                                      stream_),
                      "clear block amin");
    cuda::observed_kernel<<<grid, cuda::kThreads, 0, stream_>>>(input_.as<void>(), t.dtype, t.shape.rows, t.shape.cols,
                                                                observed_blocks(t, g), scale_inv, moments, saturated,
                                                                amax_bits, amin_bits);
    std::vector<TensorMoments> partial(static_cast<std::size_t>(grid));
    std::vector<unsigned long long> at_max(static_cast<std::size_t>(grid));
    std::vector<unsigned int> amax(count), amin(count);
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(partial.data(), moments, sizeof(TensorMoments) * grid, cudaMemcpyDeviceToHost, stream_),
                      "copy moments");
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(at_max.data(), saturated, sizeof(unsigned long long) * grid, cudaMemcpyDeviceToHost,
                                      stream_),
                      "copy saturation");
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(amax.data(), amax_bits, count * sizeof(unsigned int), cudaMemcpyDeviceToHost, stream_),
                      "copy block amax");
    FP8SCOPE_CUDA_TRY(cudaMemcpyAsync(amin.data(), amin_bits, count * sizeof(unsigned int), cudaMemcpyDeviceToHost, stream_),
                      "copy block amin");
    FP8SCOPE_CUDA_TRY(cudaStreamSynchronize(stream_), "observed codes");
    FP8SCOPE_CUDA_TRY(cudaGetLastError(), "kernel launch");
    TensorMoments m;
    std::uint64_t total_at_max = 0;
    for (int b = 0; b < grid; ++b) {
      merge(m, partial[static_cast<std::size_t>(b)]);
      total_at_max += at_max[static_cast<std::size_t>(b)];
    }
    std::vector<float> block_amax(count), block_amin(count);
    for (std::size_t k = 0; k < count; ++k) {
      block_amax[k] = bits_float(amax[k]);
      block_amin[k] = bits_float(amin[k]);
    }
    return finish_observed(g, m, total_at_max, block_amax, block_amin);
  }

 private:
  int device_;
  std::uint64_t budget_left_;
  int blocks_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;
  DeviceBuffer input_, tables_, partial_;
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
