// The CUDA parts live in a plugin, libfp8scope_cuda.so, that the daemon loads with dlopen() when it
// wants a GPU. The daemon then runs on machines without any CUDA library, and the CUDA libraries'
// large thread-local storage stays out of its threads' static TLS (cuBLASLt's alone is 94 KB,
// enough to make thread creation fail in libraries that use small stacks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8scope {
class StatsEngine;
class GpuGemmCheck;
}  // namespace fp8scope

// Exported by the plugin; each returns a new object, or null with the reason written to `error`.
extern "C" {
using Fp8scopeCudaEngineCreate = fp8scope::StatsEngine* (*)(int device, std::uint64_t memory_budget_bytes, char* error,
                                                             std::size_t error_size);
using Fp8scopeCudaGemmCheckCreate = fp8scope::GpuGemmCheck* (*)(int device, char* error, std::size_t error_size);
}
inline constexpr const char* kCudaEngineCreateSymbol = "fp8scope_cuda_engine_create";
inline constexpr const char* kCudaGemmCheckCreateSymbol = "fp8scope_cuda_gemm_check_create";
inline constexpr const char* kCudaPluginName = "libfp8scope_cuda.so";
