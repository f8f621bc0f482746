#include "fp8scope/analysis/cast_analysis.h"

#include <cmath>
#include <cstring>

#include "fp8scope/kernels/cast_inputs.h"
#include "fp8scope/kernels/dtype.h"

namespace fp8scope::server {
namespace {

// n elements of type d from possibly unaligned bytes (the cast part follows codes of any length).
std::vector<float> floats_of(const std::uint8_t* p, DType d, std::uint64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  const auto width = static_cast<std::size_t>(dtype_bytes(d));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (d == DType::kF32) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else {
      std::uint16_t bits = 0;
      std::memcpy(&bits, p + width * i, 2);
      out[i] = small_element_value(d, bits, 1.0f);
    }
  }
  return out;
}

std::vector<float> part_floats(const CastHeader& c, std::span<const std::uint8_t> part, CastPart which, DType d) {
  const int k = static_cast<int>(which);
  const std::uint64_t width = static_cast<std::uint64_t>(dtype_bytes(d));
  return floats_of(part.data() + c.layout.offset[k], d, c.layout.bytes[k] / width);
}

TensorView matrix(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  return {v.data(), DType::kF32, rows, cols, 1.0f};
}

std::vector<float> transposed(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(v.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) t[static_cast<std::size_t>(c * rows + r)] = v[static_cast<std::size_t>(r * cols + c)];
  }
  return t;
}

// The cast's tensor in the input's orientation (rows x output cols), or for a Hadamard column-wise
// copy in the copy's (cols x rows).
std::vector<float> cast_values(const CastHeader& c, std::span<const std::uint8_t> part) {
  const std::vector<float> x = part_floats(c, part, CastPart::kInput, c.input_dtype);
  const TensorView xv = matrix(x, c.rows, c.cols);
  switch (c.source) {
    case CastSource::kInput: return x;
    case CastSource::kLayernorm:
      return layernorm_output(xv, matrix(part_floats(c, part, CastPart::kGamma, c.param_dtype), 1, c.cols),
                              matrix(part_floats(c, part, CastPart::kBeta, c.param_dtype), 1, c.cols),
                              part_floats(c, part, CastPart::kMu, DType::kF32),
                              part_floats(c, part, CastPart::kRsigma, DType::kF32), c.zero_centered_gamma);
    case CastSource::kRmsnorm:
      return rmsnorm_output(xv, matrix(part_floats(c, part, CastPart::kGamma, c.param_dtype), 1, c.cols),
                            part_floats(c, part, CastPart::kRsigma, DType::kF32), c.zero_centered_gamma);
    case CastSource::kActivation:
      return activation_output(xv, *c.activation, ActivationParams{c.limit, c.alpha, c.linear_offset});
    case CastSource::kDactivation: {
      const std::vector<float> input = part_floats(c, part, CastPart::kActivationInput, c.param_dtype);
      return dactivation_output(xv, matrix(input, c.rows, c.cols), *c.activation);
    }
    case CastSource::kHadamard:
      return c.columnwise ? hadamard_columnwise_output(xv, part_floats(c, part, CastPart::kMatrix, c.param_dtype)) : x;
  }
  return {};
}

ChannelAxis flipped(ChannelAxis a) {
  return a == ChannelAxis::kRows ? ChannelAxis::kColumns : (a == ChannelAxis::kColumns ? ChannelAxis::kRows : a);
}

}  // namespace

std::span<const std::uint8_t> cast_part(const Sample& s) {
  if (!s.header.cast) return {};
  return std::span<const std::uint8_t>(s.payload.data(), s.payload.size())
      .subspan(static_cast<std::size_t>(s.header.codes_bytes + s.header.scale_bytes), static_cast<std::size_t>(s.header.cast->bytes));
}

CastScalars cast_scalars(std::span<const std::uint8_t> part) {
  CastScalars s;
  if (part.size() >= sizeof s) std::memcpy(&s, part.data(), sizeof s);
  return s;
}

Result<CastTensor> cast_tensor(const SampleHeader& h, std::span<const std::uint8_t> part) {
  if (!h.cast || part.size() != h.cast->bytes) return Status::error("the sample holds no cast part of its declared size");
  const CastHeader& c = *h.cast;
  CastTensor t;
  t.values = cast_values(c, part);
  // Stored as the codes are: the input's orientation, or its transpose for a transposed copy (a
  // Hadamard column-wise copy is one already).
  const bool hadamard_copy = c.source == CastSource::kHadamard && c.columnwise;
  std::int64_t rows = hadamard_copy ? c.output_cols() : c.rows, cols = hadamard_copy ? c.rows : c.output_cols();
  bool flips = hadamard_copy;
  if (c.transposed && !hadamard_copy) {
    t.values = transposed(t.values, rows, cols);
    std::swap(rows, cols);
    flips = true;
  }
  if (rows != h.rows || cols != h.cols) return Status::error("the cast's tensor is not the codes' shape");
  // K-major, as observed_elements() reads the codes.
  if (h.k_is_outer) {
    t.values = transposed(t.values, rows, cols);
    std::swap(rows, cols);
    flips = !flips;
  }
  t.rows = rows;
  t.cols = cols;
  const ChannelAxis axis = channel_axis_for(h.operand);
  t.channels = flips ? flipped(axis) : axis;
  return t;
}

JobCast job_cast(const SampleHeader& h, const CastScalars& scalars) {
  const CastHeader& c = *h.cast;
  JobCast j{c.recipe, QuantSpec{}, !c.unmodeled};
  QuantSpec& spec = j.spec;
  spec.format = code_format(h.dtype);
  switch (c.recipe) {
    case RecipeKind::kTensorDelayed:
    case RecipeKind::kTensorCurrent:
      // The scale the cast multiplied by (delayed: from the amax history; current: computed just
      // before, from an amax perhaps reduced across ranks).
      if (std::isfinite(scalars.scale) && scalars.scale > 0.0f) {
        spec.rule = ScaleRule::kTensorFixed;
        spec.fixed_scale = scalars.scale;
      } else {
        spec.rule = ScaleRule::kTensorCurrent;
        j.modeled = false;
      }
      break;
    case RecipeKind::kMxfp8:
    case RecipeKind::kMxfp8_2d:
      spec.rule = ScaleRule::kBlockE8M0;
      spec.block_cols = 32;
      spec.block_rows = c.two_dimensional ? 32 : 1;
      j.recipe = c.two_dimensional ? RecipeKind::kMxfp8_2d : RecipeKind::kMxfp8;
      break;
    case RecipeKind::kBlock1x128:
    case RecipeKind::kBlock128x128:
      spec.rule = ScaleRule::kBlockCurrent;
      spec.block_cols = 128;
      spec.block_rows = c.recipe == RecipeKind::kBlock128x128 ? 128 : 1;
      spec.power_of_2 = c.power_of_2;
      spec.epsilon = c.epsilon;
      break;
    case RecipeKind::kNvfp4:
    case RecipeKind::kNvfp4Rht:
    case RecipeKind::kNvfp4FourOverSix:
    case RecipeKind::kNvfp4Sr:
    case RecipeKind::kNvfp4Row:
    case RecipeKind::kNvfp4Te:
    case RecipeKind::kMxfp4: {
      spec.rule = c.four_over_six ? ScaleRule::kBlockNvfp4FourOverSix : ScaleRule::kBlockNvfp4;
      spec.block_cols = 16;
      spec.block_rows = c.two_dimensional ? 16 : 1;
      spec.stochastic = c.stochastic;
      spec.row_scaled = c.row_scaled;
      const float amax = c.columnwise ? scalars.columnwise_amax : scalars.amax;
      if (!c.row_scaled && std::isfinite(amax) && amax >= 0.0f) spec.tensor_amax = amax;
      j.recipe = c.row_scaled       ? RecipeKind::kNvfp4Row
                 : c.four_over_six  ? RecipeKind::kNvfp4FourOverSix
                 : c.stochastic     ? RecipeKind::kNvfp4Sr
                 : c.source == CastSource::kHadamard && c.columnwise ? RecipeKind::kNvfp4Rht
                                                                     : RecipeKind::kNvfp4;
      break;
    }
  }
  return j;
}

}  // namespace fp8scope::server
