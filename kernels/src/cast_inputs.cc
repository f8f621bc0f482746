#include "fp8scope/kernels/cast_inputs.h"

#include <algorithm>
#include <cmath>

#include "fp8scope/kernels/dtype.h"

namespace fp8scope {
namespace {

float element(const TensorView& t, std::int64_t i) {
  return load_element(t.data, static_cast<std::size_t>(i), t.dtype, t.scale_inv);
}

// util/math.h, in its order of operations.
float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
float dsigmoid(float x) {
  const float s = sigmoid(x);
  return s * (1.f - s);
}
float gelu(float x) { return x * (0.5F + 0.5F * std::tanh(x * (0.79788456F + 0.03567741F * x * x))); }
float dgelu(float x) {
  const float t = std::tanh(0.79788456f * x * (1.f + 0.044715f * x * x));
  return 0.5f * x * ((1.f - t * t) * (0.79788456f + 0.1070322243f * x * x)) + 0.5f * (1.f + t);
}
float qgelu(float x) { return x * sigmoid(1.702f * x); }
float dqgelu(float x) { return 1.702f * x * dsigmoid(1.702f * x) + sigmoid(1.702f * x); }
float silu(float x) { return x * sigmoid(x); }
float dsilu(float x) { return x * dsigmoid(x) + sigmoid(x); }
float relu(float x) { return std::fmax(x, 0.f); }
float drelu(float x) { return x > 0.f ? 1.f : 0.f; }
float srelu(float x) { return x > 0 ? x * x : 0.f; }
float dsrelu(float x) { return std::fmax(2.f * x, 0.f); }

// The activation applied to the gate half (and to a non-gated input).
float act(Activation a, float x, const ActivationParams& p) {
  switch (a) {
    case Activation::kGelu:
    case Activation::kGeglu: return gelu(x);
    case Activation::kSilu:
    case Activation::kSwiglu: return silu(x);
    case Activation::kRelu:
    case Activation::kReglu: return relu(x);
    case Activation::kQgelu:
    case Activation::kQgeglu: return qgelu(x);
    case Activation::kSrelu:
    case Activation::kSreglu: return srelu(x);
    case Activation::kGlu: return sigmoid(x);
    case Activation::kClampedSwiglu: {  // clamped_silu: qgelu_with_alpha of min(limit, x)
      const float c = std::min(p.limit, x);
      return c * sigmoid(p.alpha * c);
    }
  }
  return x;
}

float dact(Activation a, float x) {
  switch (a) {
    case Activation::kGelu: return dgelu(x);
    case Activation::kSilu: return dsilu(x);
    case Activation::kRelu: return drelu(x);
    case Activation::kQgelu: return dqgelu(x);
    case Activation::kSrelu: return dsrelu(x);
    case Activation::kGlu:
    case Activation::kGeglu:
    case Activation::kSwiglu:
    case Activation::kReglu:
    case Activation::kQgeglu:
    case Activation::kSreglu:
    case Activation::kClampedSwiglu: break;  // gated gradients are cast from a high-precision tensor
  }
  return std::nanf("");
}

}  // namespace

std::vector<float> layernorm_output(const TensorView& x, const TensorView& gamma, const TensorView& beta,
                                    std::span<const float> mu, std::span<const float> rsigma, bool zero_centered_gamma) {
  std::vector<float> out(static_cast<std::size_t>(x.numel()));
  for (std::int64_t r = 0; r < x.rows; ++r) {
    const float m = mu[static_cast<std::size_t>(r)], rs = rsigma[static_cast<std::size_t>(r)];
    for (std::int64_t c = 0; c < x.cols; ++c) {
      const float y = rs * (element(x, r * x.cols + c) - m);
      float g = element(gamma, c);
      if (zero_centered_gamma) g += 1;
      out[static_cast<std::size_t>(r * x.cols + c)] = g * y + element(beta, c);
    }
  }
  return out;
}

std::vector<float> rmsnorm_output(const TensorView& x, const TensorView& gamma, std::span<const float> rsigma,
                                  bool zero_centered_gamma) {
  std::vector<float> out(static_cast<std::size_t>(x.numel()));
  for (std::int64_t r = 0; r < x.rows; ++r) {
    const float rs = rsigma[static_cast<std::size_t>(r)];
    for (std::int64_t c = 0; c < x.cols; ++c) {
      const float y = rs * element(x, r * x.cols + c);
      float g = element(gamma, c);
      if (zero_centered_gamma) g += 1;
      out[static_cast<std::size_t>(r * x.cols + c)] = g * y;
    }
  }
  return out;
}

std::vector<float> activation_output(const TensorView& x, Activation a, const ActivationParams& p) {
  const bool gated = activation_gated(a);
  const std::int64_t cols = gated ? x.cols / 2 : x.cols;
  std::vector<float> out(static_cast<std::size_t>(x.rows * cols));
  for (std::int64_t r = 0; r < x.rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float gate = element(x, r * x.cols + c);
      float value = act(a, gate, p);
      if (gated) {
        float linear = element(x, r * x.cols + cols + c);
        if (a == Activation::kClampedSwiglu) linear = std::min(std::max(-p.limit, linear), p.limit) + p.linear_offset;
        value = value * linear;
      }
      out[static_cast<std::size_t>(r * cols + c)] = value;
    }
  }
  return out;
}

std::vector<float> dactivation_output(const TensorView& grad, const TensorView& input, Activation a) {
  std::vector<float> out(static_cast<std::size_t>(grad.numel()));
  for (std::int64_t i = 0; i < grad.numel(); ++i) {
    out[static_cast<std::size_t>(i)] = dact(a, element(input, i)) * element(grad, i);
  }
  return out;
}

std::vector<float> hadamard_columnwise_output(const TensorView& x, std::span<const float> matrix16x16) {
  constexpr std::int64_t kGroup = 16;
  std::vector<float> out(static_cast<std::size_t>(x.numel()));
  float v[kGroup];
  for (std::int64_t c = 0; c < x.cols; ++c) {
    for (std::int64_t g = 0; g + kGroup <= x.rows; g += kGroup) {
      for (std::int64_t i = 0; i < kGroup; ++i) v[i] = element(x, (g + i) * x.cols + c);
      for (std::int64_t j = 0; j < kGroup; ++j) {
        float sum = 0.0f;
        for (std::int64_t i = 0; i < kGroup; ++i) sum += v[i] * matrix16x16[static_cast<std::size_t>(i * kGroup + j)];
        out[static_cast<std::size_t>(c * x.rows + g + j)] = sum;
      }
    }
  }
  return out;
}

}  // namespace fp8scope
