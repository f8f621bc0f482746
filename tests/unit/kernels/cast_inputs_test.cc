// The tensors TE's fused casts never write, recomputed from the kernels' inputs: each against the
// formula in long double (TE's util/math.h, its norm kernels, the Hadamard product), to the few
// fp32 ulps a host recompute may differ by from the GPU's.
#include "fp8scope/kernels/cast_inputs.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "fp8scope/kernels/hadamard_transform.h"

using namespace fp8scope;

namespace {

using Real = long double;

std::vector<float> normal(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TensorView view(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  return {v.data(), DType::kF32, rows, cols, 1.0f};
}

// Within a few ulps of the value, or of the largest term it came from (a sum that cancels).
void check_close(float got, Real want, Real magnitude) {
  const Real tolerance = 8 * std::numeric_limits<float>::epsilon() * std::max<Real>(std::fabs(want), magnitude) + 1e-30L;
  REQUIRE(std::fabs(static_cast<Real>(got) - want) <= tolerance);
}

Real sigmoid(Real x) { return 1 / (1 + std::exp(-x)); }

// TE's activations (util/math.h), in long double.
Real act(Activation a, Real x) {
  constexpr Real k = 0.79788456L, c = 0.044715L;
  switch (a) {
    case Activation::kGelu:
    case Activation::kGeglu: return 0.5L * x * (1 + std::tanh(k * x * (1 + c * x * x)));
    case Activation::kSilu:
    case Activation::kSwiglu: return x * sigmoid(x);
    case Activation::kRelu:
    case Activation::kReglu: return x > 0 ? x : 0;
    case Activation::kQgelu:
    case Activation::kQgeglu: return x * sigmoid(1.702L * x);
    case Activation::kSrelu:
    case Activation::kSreglu: return x > 0 ? x * x : 0;
    case Activation::kGlu: return sigmoid(x);
    case Activation::kClampedSwiglu: {
      const Real v = std::min<Real>(7, x);
      return v * sigmoid(1.702L * v);
    }
  }
  return NAN;
}

Real dact(Activation a, Real x) {
  constexpr Real k = 0.79788456L, c = 0.044715L;
  switch (a) {
    case Activation::kGelu: {
      const Real t = std::tanh(k * x * (1 + c * x * x));
      return 0.5L * (1 + t) + 0.5L * x * (1 - t * t) * k * (1 + 3 * c * x * x);
    }
    case Activation::kSilu: return sigmoid(x) * (1 + x * (1 - sigmoid(x)));
    case Activation::kRelu: return x > 0 ? 1 : 0;
    case Activation::kQgelu: return sigmoid(1.702L * x) * (1 + 1.702L * x * (1 - sigmoid(1.702L * x)));
    case Activation::kSrelu: return x > 0 ? 2 * x : 0;
    default: return NAN;
  }
}

}  // namespace

TEST_CASE("LayerNorm and RMSNorm outputs are the kernels' formulas, zero-centered gamma or not") {
  const std::int64_t rows = 7, cols = 96;
  const std::vector<float> x = normal(rows * cols, 1, 3.0f), gamma = normal(cols, 2), beta = normal(cols, 3);
  std::vector<float> mu(rows), rsigma(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    Real sum = 0, squares = 0;
    for (std::int64_t c = 0; c < cols; ++c) sum += x[r * cols + c];
    const Real m = sum / cols;
    for (std::int64_t c = 0; c < cols; ++c) squares += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    mu[r] = static_cast<float>(m);
    rsigma[r] = static_cast<float>(1 / std::sqrt(squares / cols + 1e-5L));
  }
  for (bool zero_centered : {false, true}) {
    CAPTURE(zero_centered);
    const std::vector<float> ln = layernorm_output(view(x, rows, cols), view(gamma, 1, cols), view(beta, 1, cols), mu,
                                                   rsigma, zero_centered);
    const std::vector<float> rms = rmsnorm_output(view(x, rows, cols), view(gamma, 1, cols), rsigma, zero_centered);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const Real g = gamma[c] + (zero_centered ? 1 : 0);
        const Real y = (static_cast<Real>(x[r * cols + c]) - mu[r]) * rsigma[r];
        check_close(ln[r * cols + c], g * y + beta[c], std::fabs(g * y) + std::fabs(beta[c]));
        check_close(rms[r * cols + c], g * x[r * cols + c] * rsigma[r], 0);
      }
    }
  }
}

TEST_CASE("every activation, gated ones over their two halves") {
  const std::int64_t rows = 5, cols = 64;
  const std::vector<float> x = normal(rows * 2 * cols, 4, 3.0f);
  for (const ActivationTerm& term : kActivations) {
    CAPTURE(term.name);
    const std::int64_t in_cols = term.gated ? 2 * cols : cols;
    const std::vector<float> out = activation_output(view(x, rows, in_cols), term.value);
    REQUIRE(out.size() == static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const Real gate = x[r * in_cols + c];
        Real want = act(term.value, gate);
        if (term.gated) {
          Real linear = x[r * in_cols + cols + c];
          if (term.value == Activation::kClampedSwiglu) linear = std::clamp<Real>(linear, -7, 7) + 1;
          want *= linear;
        }
        // TE's formulas cancel (gelu's 1 + tanh far below zero): within ulps of their terms' size.
        const Real linear_size = term.gated ? std::fabs(static_cast<Real>(x[r * in_cols + cols + c])) + 1 : 1;
        check_close(out[r * cols + c], want, (std::fabs(gate) + 1) * linear_size);
      }
    }
  }
}

TEST_CASE("the gradients through the non-gated activations") {
  const std::int64_t rows = 4, cols = 80;
  const std::vector<float> grad = normal(rows * cols, 5), input = normal(rows * cols, 6, 2.0f);
  for (Activation a : {Activation::kGelu, Activation::kSilu, Activation::kRelu, Activation::kQgelu, Activation::kSrelu}) {
    CAPTURE(activation_name(a));
    const std::vector<float> out = dactivation_output(view(grad, rows, cols), view(input, rows, cols), a);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const Real want = dact(a, input[i]) * grad[i];
      // TE's formulas cancel like the activations: within ulps of their terms' size.
      const Real x = input[i];
      check_close(out[i], want, std::fabs(grad[i]) * (1 + std::fabs(x) + x * x));
    }
  }
}

TEST_CASE("the column-wise Hadamard copy is x^T in 16-row groups times the matrix, an isometry for TE's") {
  const std::int64_t rows = 32, cols = 24;
  const std::vector<float> x = normal(rows * cols, 7);
  std::vector<float> m(256);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      m[i * 16 + j] = static_cast<float>(kHadamardSigns[i] * ((__builtin_popcount(i & j) % 2) ? -1 : 1)) / 4.0f;
    }
  }
  const std::vector<float> out = hadamard_columnwise_output(view(x, rows, cols), m);
  REQUIRE(out.size() == x.size());
  for (std::int64_t c = 0; c < cols; ++c) {
    for (std::int64_t g = 0; g < rows; g += 16) {
      Real in_norm = 0, out_norm = 0;
      for (int j = 0; j < 16; ++j) {
        Real want = 0, magnitude = 0;
        for (int i = 0; i < 16; ++i) {
          want += static_cast<Real>(x[(g + i) * cols + c]) * m[i * 16 + j];
          magnitude += std::fabs(static_cast<Real>(x[(g + i) * cols + c]) * m[i * 16 + j]);
        }
        check_close(out[c * rows + g + j], want, magnitude);
        in_norm += static_cast<Real>(x[(g + j) * cols + c]) * x[(g + j) * cols + c];
        out_norm += static_cast<Real>(out[c * rows + g + j]) * out[c * rows + g + j];
      }
      CHECK(static_cast<double>(out_norm) == Approx(static_cast<double>(in_norm)).epsilon(1e-5));
    }
  }
}
