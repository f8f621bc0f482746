#include "fp8scope/analysis/gemm_checker.h"

#include <spdlog/spdlog.h>

namespace fp8scope::server {

std::vector<GemmCheckResult> GemmChecker::check(const GemmPair& p) {
  const TensorView x{p.x.data(), p.x_dtype, p.x_rows, p.x_cols, p.x_scale_inv};
  const TensorView w{p.w.data(), p.w_dtype, p.w_rows, p.w_cols, p.w_scale_inv};
  std::lock_guard<std::mutex> lock(mu_);
  if (gpu_ != nullptr) {
    Result<std::vector<GemmCheckResult>> gpu = gpu_->run(x, w);
    if (gpu.ok() && !gpu.value().empty()) return std::move(gpu).value();
    if (!gpu.ok()) spdlog::debug("GEMM check of {} on the GPU: {}; emulating on the CPU", p.layer, gpu.message());
  }
  Result<GemmCheckResult> cpu = gemm_check_cpu(x, w, CastFormat::kE4M3);
  if (!cpu.ok()) {
    spdlog::debug("GEMM check of {} skipped: {}", p.layer, cpu.message());
    return {};
  }
  return {cpu.value()};
}

}  // namespace fp8scope::server
