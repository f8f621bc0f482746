// The CPU GEMM check against a long double reference built from the bit-exact casts, and its edges:
// exact operands give no error, the row budget cuts X, mismatched K is refused.
#include "fp8scope/kernels/gemm_check.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/scale_rules.h"

using namespace fp8scope;

namespace {

std::vector<float> dequantized(const std::vector<float>& v, float* scale) {
  float amax = 0;
  for (float x : v) amax = std::max(amax, std::fabs(x));
  *scale = current_scale(amax, 448.0f, false, 0.0f);
  std::vector<float> out;
  for (float x : v) out.push_back(decode<kE4M3>(encode<kE4M3>(x * *scale, Saturation::kSatFinite).code) * (1.0f / *scale));
  return out;
}

}  // namespace

TEST_CASE("the CPU GEMM check matches a long double reference", "[gemm_check]") {
  const int m = 24, n = 40, k = 96;
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  std::vector<float> x(m * k), w(n * k);
  for (float& v : x) v = d(rng);
  for (float& v : w) v = d(rng) * 0.02f;
  x[7] = 40.0f;  // an outlier that costs X precision
  const TensorView xv{x.data(), DType::kF32, m, k, 1.0f}, wv{w.data(), DType::kF32, n, k, 1.0f};
  auto r = gemm_check_cpu(xv, wv, CastFormat::kE4M3);
  REQUIRE(r.ok());
  float sx, sw;
  const std::vector<float> xq = dequantized(x, &sx), wq = dequantized(w, &sw);
  long double se = 0, dot = 0, rr = 0, tt = 0, max_err = 0, max_ref = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      long double ref = 0, test = 0;
      for (int p = 0; p < k; ++p) {
        ref += static_cast<long double>(x[i * k + p]) * w[j * k + p];
        test += static_cast<long double>(xq[i * k + p]) * wq[j * k + p];
      }
      se += (test - ref) * (test - ref);
      dot += ref * test;
      rr += ref * ref;
      tt += test * test;
      max_err = std::max(max_err, std::fabs(test - ref));
      max_ref = std::max(max_ref, std::fabs(ref));
    }
  CHECK(r.value().accumulate == "emulated");
  CHECK(r.value().rows == m);
  CHECK(r.value().scale_x == sx);
  CHECK(r.value().scale_w == sw);
  CHECK(r.value().mse == Approx(static_cast<double>(se / (m * n))).epsilon(1e-4));  // fp32 accumulation
  CHECK(r.value().cosine == Approx(static_cast<double>(dot / std::sqrt(rr * tt))).epsilon(1e-6));
  CHECK(r.value().max_rel_error == Approx(static_cast<double>(max_err / max_ref)).epsilon(1e-3));
  CHECK(r.value().mse > 0.0);
}

TEST_CASE("operands E4M3 holds exactly give an exact FP8 GEMM", "[gemm_check]") {
  // amax 3.5 and 1.75 make the current scales 448/3.5 = 2^7 and 448/1.75 = 2^8, so small integers
  // and halves survive the cast exactly and their products sum exactly in fp32.
  std::vector<float> x(16 * 32), w(8 * 32);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 5) - 2) * 0.5f;
  x[0] = 3.5f;
  w[0] = 1.75f;
  auto r = gemm_check_cpu(TensorView{x.data(), DType::kF32, 16, 32, 1.0f}, TensorView{w.data(), DType::kF32, 8, 32, 1.0f},
                          CastFormat::kE4M3);
  REQUIRE(r.ok());
  CHECK(r.value().mse == 0.0);
  CHECK(r.value().max_rel_error == 0.0);
  CHECK(r.value().cosine == Approx(1.0).epsilon(1e-15));
}

TEST_CASE("the row budget and the shapes", "[gemm_check]") {
  std::vector<float> x(100 * 64, 1.0f), w(50 * 64, 1.0f);
  auto r = gemm_check_cpu(TensorView{x.data(), DType::kF32, 100, 64, 1.0f},
                          TensorView{w.data(), DType::kF32, 50, 64, 1.0f}, CastFormat::kE4M3, 10 * 50 * 64);
  REQUIRE(r.ok());
  CHECK(r.value().rows == 10);
  CHECK(r.value().m == 100);
  auto bad = gemm_check_cpu(TensorView{x.data(), DType::kF32, 100, 64, 1.0f}, TensorView{w.data(), DType::kF32, 64, 50, 1.0f},
                            CastFormat::kE4M3);
  CHECK(bad.message() == "gemm check: expected X [M, K] and W [N, K] with the same K, got K = 64 and 50");
}
