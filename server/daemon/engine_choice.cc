#include "fp8scope/daemon/engine_choice.h"

#include <spdlog/spdlog.h>

#include <atomic>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/cuda_engine.h"

namespace fp8scope::server {
namespace {

class FallbackEngine final : public StatsEngine {
 public:
  FallbackEngine(std::unique_ptr<StatsEngine> primary, std::unique_ptr<StatsEngine> fallback, int max_failures)
      : primary_(std::move(primary)), fallback_(std::move(fallback)), max_failures_(max_failures) {}

  const char* name() const override { return failures_.load() >= max_failures_ ? fallback_->name() : primary_->name(); }

  Status analyze(const TensorView& t, std::span<const QuantSpec> specs, TensorAnalysis* out) override {
    if (failures_.load() < max_failures_) {
      const Status s = primary_->analyze(t, specs, out);
      if (s.ok()) {
        failures_ = 0;
        return s;
      }
      const int n = ++failures_;
      spdlog::error("{} failed ({}); analyzing on {} instead{}", primary_->name(), s.message(), fallback_->name(),
                    n >= max_failures_ ? ", from now on" : "");
    }
    return fallback_->analyze(t, specs, out);
  }

 private:
  std::unique_ptr<StatsEngine> primary_, fallback_;
  const int max_failures_;
  std::atomic<int> failures_{0};
};

}  // namespace

std::unique_ptr<StatsEngine> with_fallback(std::unique_ptr<StatsEngine> primary, std::unique_ptr<StatsEngine> fallback,
                                           int max_failures) {
  return std::make_unique<FallbackEngine>(std::move(primary), std::move(fallback), max_failures);
}

Result<EngineChoice> choose_engine(const DaemonConfig& c) {
  CpuEngineOptions cpu_options;
  cpu_options.threads = c.engine_threads;
  auto cpu = make_cpu_engine(cpu_options);
  if (!cpu.ok()) return cpu.status();
  EngineChoice choice;
  if (c.backend == "cpu") {
    choice.engine = std::move(cpu).value();
    choice.backend = "cpu";
    return choice;
  }
  CudaEngineOptions cuda_options;
  cuda_options.device = c.device;
  cuda_options.memory_budget_bytes = c.gpu_memory_budget_bytes;
  auto cuda = make_cuda_engine(cuda_options);
  if (!cuda.ok()) {
    if (c.backend == "cuda") return Status::error("--backend cuda: " + cuda.message());
    spdlog::info("backend auto: no usable GPU ({}); using the CPU", cuda.message());
    choice.engine = std::move(cpu).value();
    choice.backend = "cpu";
    return choice;
  }
  choice.backend = cuda.value()->name();
  spdlog::info("backend {}: statistics on the GPU, the CPU as fallback", choice.backend);
  choice.engine = with_fallback(std::move(cuda).value(), std::move(cpu).value());
  auto gemm = make_gpu_gemm_check(c.device);
  if (gemm.ok()) {
    choice.gemm = std::move(gemm).value();
  } else {
    spdlog::warn("GEMM checks will run as the CPU emulation: {}", gemm.message());
  }
  return choice;
}

}  // namespace fp8scope::server
