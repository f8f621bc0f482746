#include "fp8scope/hook/te_tensors.h"

#include <cstring>

namespace fp8scope::hook::te {
namespace {

std::optional<DType> dtype_of(int code) {
  switch (static_cast<DTypeCode>(code)) {
    case DTypeCode::kFloat32: return DType::kF32;
    case DTypeCode::kFloat16: return DType::kF16;
    case DTypeCode::kBFloat16: return DType::kBF16;
    case DTypeCode::kFloat8E4M3: return DType::kE4M3;
    case DTypeCode::kFloat8E5M2: return DType::kE5M2;
    case DTypeCode::kFloat4E2M1: return DType::kE2M1;
    case DTypeCode::kByte:
    case DTypeCode::kInt16:
    case DTypeCode::kInt32:
    case DTypeCode::kInt64:
    case DTypeCode::kFloat8E8M0: break;
  }
  return std::nullopt;
}

// A pointer-valued parameter (amax, column-wise amax): the size-checked getter where TE has it.
void* pointer_param(const Api& api, Tensor t, TensorParam p) {
  BasicTensor b{};
  if (api.get_tensor_param_v2 != nullptr) {
    std::size_t written = 0;
    api.get_tensor_param_v2(t, static_cast<int>(p), &b, sizeof b, &written);
    return b.data_ptr;
  }
  return api.get_tensor_param(t, static_cast<int>(p)).data_ptr;
}

// A small parameter only the size-checked getter reads (2.12+); `fallback` before it, or when this
// TE has no such parameter (it throws).
template <class T>
T value_param(const Api& api, Tensor t, TensorParam p, T fallback) {
  if (api.get_tensor_param_v2 == nullptr) return fallback;
  try {
    T v{};
    std::size_t written = 0;
    api.get_tensor_param_v2(t, static_cast<int>(p), &v, sizeof v, &written);
    return written == sizeof v ? v : fallback;
  } catch (...) {
    return fallback;
  }
}

template <class T>
T attribute(const Api& api, QuantConfig c, ConfigAttribute a, T fallback) {
  if (api.get_quantization_config_attribute == nullptr || c == nullptr) return fallback;
  try {
    T v{};
    std::size_t written = 0;
    api.get_quantization_config_attribute(c, static_cast<int>(a), &v, sizeof v, &written);
    return written == sizeof v ? v : fallback;
  } catch (...) {  // an attribute newer than this TE
    return fallback;
  }
}

}  // namespace

std::optional<TensorFacts> read_tensor(const Api& api, Tensor t) noexcept {
  if (t == nullptr || !api.complete()) return std::nullopt;
  try {
    TensorFacts f;
    f.data = api.tensor_data(t);
    f.columnwise = api.tensor_columnwise_data(t);
    f.dtype = dtype_of(api.tensor_type(t));
    const std::size_t ndims = api.tensor_ndims(t);
    if (ndims == 0) return std::nullopt;
    std::int64_t rows = 1;
    for (std::size_t d = 0; d + 1 < ndims; ++d) rows *= static_cast<std::int64_t>(api.tensor_size(t, d));
    f.rows = rows;
    f.cols = static_cast<std::int64_t>(api.tensor_size(t, ndims - 1));
    if (f.rows <= 0 || f.cols <= 0) return std::nullopt;
    f.mode = static_cast<ScalingMode>(api.tensor_scaling_mode(t));
    f.scale = api.tensor_scale(t);
    f.amax = pointer_param(api, t, TensorParam::kAmax);
    f.columnwise_amax = pointer_param(api, t, TensorParam::kColumnwiseAmax);
    f.row_scaled = value_param<std::uint8_t>(api, t, TensorParam::kRowScaledNvfp4, 0) != 0;
    f.nvfp4_e4m3_max = value_param<int>(api, t, TensorParam::kNvfp4E4M3Max, 448);
    return f;
  } catch (...) {
    return std::nullopt;
  }
}

void* data_of(const Api& api, Tensor t) noexcept {
  if (t == nullptr || api.tensor_data == nullptr) return nullptr;
  try {
    return api.tensor_data(t);
  } catch (...) {
    return nullptr;
  }
}

ConfigFacts read_config(const Api& api, QuantConfig config) noexcept {
  ConfigFacts f;
  if (config == nullptr) return f;
  f.power_of_2 = attribute<std::uint8_t>(api, config, ConfigAttribute::kForcePow2Scales, 0) != 0;
  f.epsilon = attribute<float>(api, config, ConfigAttribute::kAmaxEpsilon, 0.0f);
  f.noop = data_of(api, attribute<Tensor>(api, config, ConfigAttribute::kNoopTensor, nullptr));
  f.nvfp4_2d = attribute<std::uint8_t>(api, config, ConfigAttribute::kNvfp4_2d, 0) != 0;
  f.stochastic = attribute<std::uint8_t>(api, config, ConfigAttribute::kStochasticRounding, 0) != 0;
  f.fast_math = attribute<std::uint8_t>(api, config, ConfigAttribute::kUseFastMath, 0) != 0;
  f.four_over_six = attribute<std::uint8_t>(api, config, ConfigAttribute::kNvfp4FourOverSixMode, 0);
  f.four_over_six_fast_math = attribute<std::uint8_t>(api, config, ConfigAttribute::kNvfp4FourOverSixErrFastMath, 0) != 0;
  f.mxfp8_2d = attribute<std::uint8_t>(api, config, ConfigAttribute::kMxfp8_2d, 0) != 0;
  return f;
}

RecipeFacts recipe_facts(const TensorFacts& out, const ConfigFacts& c) {
  RecipeFacts r{RecipeKind::kTensorCurrent, 0, 0.0f, true};
  switch (out.mode) {
    case ScalingMode::kDelayedTensor:
      // Delayed scaling casts into its amax history's slot; current scaling's cast has no amax
      // (its scale was computed from one just before: pytorch/csrc/quantizer.cpp:980-1033).
      r.recipe = out.amax != nullptr ? RecipeKind::kTensorDelayed : RecipeKind::kTensorCurrent;
      break;
    case ScalingMode::kMxfp8_1d:
      r.recipe = RecipeKind::kMxfp8;
      r.flags |= c.mxfp8_2d ? shm::kCast2d : 0;
      r.columnwise_transposed = false;  // same shape, scales along the columns
      break;
    case ScalingMode::kBlock1d:
    case ScalingMode::kBlock2d:
      r.recipe = out.mode == ScalingMode::kBlock2d ? RecipeKind::kBlock128x128 : RecipeKind::kBlock1x128;
      r.flags |= c.power_of_2 ? shm::kCastPowerOf2 : 0;
      r.epsilon = c.epsilon;
      break;
    case ScalingMode::kNvfp4_1d: {
      r.recipe = RecipeKind::kNvfp4;
      r.flags |= (c.nvfp4_2d ? shm::kCast2d : 0) | (c.stochastic ? shm::kCastStochastic : 0) |
                 (out.row_scaled ? shm::kCastRowScaled : 0);
      // fp8scope models TE's default 4over6 pick (min MAE, exact error sums) and the standard
      // bounds (448; 256 under 4over6); fast math and the others change codes it cannot predict.
      const bool four_over_six = c.four_over_six != 0;
      r.flags |= four_over_six ? shm::kCastFourOverSix : 0;
      const bool modeled = (c.four_over_six == 0 || c.four_over_six == 1) && !c.four_over_six_fast_math &&
                           !c.fast_math && out.nvfp4_e4m3_max == (four_over_six ? 256 : 448);
      r.flags |= modeled ? 0 : shm::kCastUnmodeled;
      break;
    }
  }
  return r;
}

}  // namespace fp8scope::hook::te
