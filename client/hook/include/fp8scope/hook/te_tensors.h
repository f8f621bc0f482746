// What the hook reads of Transformer Engine's tensors and quantization configs inside a cast call
// (te_api.h): the data pointers, the element type, the shape as a matrix (TE views N-d tensors as
// prod(shape[:-1]) x shape[-1]), the scaling mode, and the device scalars the cast used. Every
// read catches what TE's getters throw; a tensor that cannot be read is nothing.
#pragma once

#include <cstdint>
#include <optional>

#include "fp8scope/hook/te_api.h"
#include "fp8scope/shm/shm_ring.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/recipe_kind.h"

namespace fp8scope::hook::te {

struct TensorFacts {
  void* data = nullptr;        // row-wise data
  void* columnwise = nullptr;  // column-wise data
  std::optional<DType> dtype;  // nothing for a type fp8scope does not read (bytes, integers, E8M0)
  std::int64_t rows = 0, cols = 0;
  ScalingMode mode = ScalingMode::kDelayedTensor;
  float* scale = nullptr;            // per-tensor FP8: what the cast multiplies by
  void* amax = nullptr;              // delayed scaling: written by the cast; NVFP4: read by it
  void* columnwise_amax = nullptr;   // NVFP4: the column-wise (post-Hadamard) amax
  bool row_scaled = false;           // NVFP4 with one amax per row (2.18+)
  int nvfp4_e4m3_max = 448;          // NVFP4's global scale bound (2.18+)

  bool quantized() const { return dtype && dtype_is_codes(*dtype); }
};

struct ConfigFacts {
  bool power_of_2 = false;
  float epsilon = 0.0f;
  void* noop = nullptr;  // device fp32: 1 means the cast wrote nothing
  bool nvfp4_2d = false, stochastic = false, fast_math = false, mxfp8_2d = false;
  std::uint8_t four_over_six = 0;  // NVTENVFP44Over6Mode
  bool four_over_six_fast_math = false;
};

// The facts of one tensor; nothing when TE's getters refuse it or its shape is not a matrix of at
// least one element. A null handle (an optional argument) is nothing too.
std::optional<TensorFacts> read_tensor(const Api& api, Tensor t) noexcept;

// A config's attributes; those the library does not have (older TE) keep their defaults.
ConfigFacts read_config(const Api& api, QuantConfig config) noexcept;

// The data pointer of a tensor (a workspace, a no-op flag), or null.
void* data_of(const Api& api, Tensor t) noexcept;

// The cast's recipe and options as the record says them (shm::CastRecord: recipe, flags), from the
// output's scaling mode and the config.
struct RecipeFacts {
  RecipeKind recipe;
  std::uint32_t flags;  // shm::kCast* (not kCastColumnwise or kCastTransposed: the GEMM says those)
  float epsilon;
  bool columnwise_transposed;  // the mode's column-wise copy is the input's transpose
};
RecipeFacts recipe_facts(const TensorFacts& output, const ConfigFacts& config);

}  // namespace fp8scope::hook::te
