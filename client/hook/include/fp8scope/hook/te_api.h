// Transformer Engine's C API (libtransformer_engine.so) as the hook uses it, declared here from
// TE's headers (transformer_engine/common/include/transformer_engine/, TE d0067d0) rather than
// included: the hook builds without TE. Resolved at run time like cuBLAS (real_api.h): the next
// definition after the hook (TE loads its library RTLD_GLOBAL: common/__init__.py:383-385), else
// the library already loaded. Nothing is linked, so a process without TE loads the hook harmlessly.
//
// The hook reads TE's tensors only through scalar getters, whose signatures have not changed
// since TE 2.0 (transformer_engine.h:190-305), and never through NVTEShape, whose layout changed
// at 2.4 (PR #1708). Since 2.5 an NVTETensor is an index into TE's own table, recycled when its
// wrapper dies (PR #1813): it is read inside the call, never kept. The getters throw C++
// exceptions on what they refuse (NVTE_CHECK); every read catches them.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace fp8scope::hook::te {

using Tensor = void*;          // NVTETensor (transformer_engine.h:136)
using QuantConfig = void*;     // NVTEQuantizationConfig (:389)
using Stream = CUstream;       // cudaStream_t: the runtime's stream is the driver's

// NVTEDType (transformer_engine.h:25-37).
enum class DTypeCode : int {
  kByte = 0, kInt16 = 1, kInt32 = 2, kInt64 = 3, kFloat32 = 4, kFloat16 = 5, kBFloat16 = 6,
  kFloat8E4M3 = 7, kFloat8E5M2 = 8, kFloat8E8M0 = 9, kFloat4E2M1 = 10,
};

// NVTEScalingMode (transformer_engine.h:99-118).
enum class ScalingMode : int { kDelayedTensor = 0, kMxfp8_1d = 1, kBlock1d = 2, kBlock2d = 3, kNvfp4_1d = 4 };

// NVTETensorParam (transformer_engine.h:66-95) and NVTEQuantizationConfigAttribute (:400-442),
// the ones read; each attribute's size is TE's QuantizationConfig::attr_sizes (common.h:611-623).
enum class TensorParam : int { kAmax = 3, kColumnwiseAmax = 6, kRowScaledNvfp4 = 8, kNvfp4E4M3Max = 9 };
enum class ConfigAttribute : int {
  kForcePow2Scales = 0,  // uint8
  kAmaxEpsilon = 1,      // float
  kNoopTensor = 2,       // NVTETensor
  kNvfp4_2d = 5,         // uint8
  kStochasticRounding = 6,
  kUseFastMath = 7,
  kNvfp4FourOverSixMode = 8,  // uint8 NVTENVFP44Over6Mode: 0 off, 1 min MAE, 2 min MSE
  kNvfp4FourOverSixErrFastMath = 9,
  kMxfp8_2d = 10,
};

// NVTEBasicTensor as nvte_get_tensor_param returns it: its data pointer leads in both layouts of
// NVTEShape, {const size_t*, ndim} before 2.4 and {size_t data[15], ndim} since; declared the size
// of the larger so either library's write fits (both are returned through memory).
struct BasicTensor {
  void* data_ptr;
  int dtype;
  std::size_t shape[16];
};

struct Api {
  void* (*tensor_data)(Tensor) = nullptr;
  void* (*tensor_columnwise_data)(Tensor) = nullptr;
  int (*tensor_type)(Tensor) = nullptr;
  std::size_t (*tensor_ndims)(Tensor) = nullptr;
  std::size_t (*tensor_size)(Tensor, std::size_t) = nullptr;
  int (*tensor_scaling_mode)(Tensor) = nullptr;
  float* (*tensor_scale)(Tensor) = nullptr;
  BasicTensor (*get_tensor_param)(Tensor, int) = nullptr;                           // 2.0-2.11
  void (*get_tensor_param_v2)(Tensor, int, void*, std::size_t, std::size_t*) = nullptr;  // 2.12+
  void (*get_quantization_config_attribute)(QuantConfig, int, void*, std::size_t, std::size_t*) = nullptr;  // 2.2+

  // The getters every read needs.
  bool complete() const {
    return tensor_data && tensor_columnwise_data && tensor_type && tensor_ndims && tensor_size && tensor_scaling_mode &&
           tensor_scale && (get_tensor_param || get_tensor_param_v2);
  }
};

// Resolved on first use (thread-safe), then constant; all null without TE.
const Api& api();

// The real entry point `name` below the hook, or null.
void* real_entry(const char* name);

}  // namespace fp8scope::hook::te
