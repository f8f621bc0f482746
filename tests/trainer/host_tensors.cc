#include "host_tensors.h"

#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/recipe.h"

namespace fp8scope::trainer {
namespace {

Recipe delayed_recipe(int history) {
  Recipe r = default_recipe(RecipeKind::kTensorDelayed);
  r.amax_history_length = history;
  return r;
}

}  // namespace

Matrix Matrix::transposed() const {
  Matrix t(cols, rows);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) t.at(c, r) = at(r, c);
  }
  return t;
}

Matrix random_normal(int rows, int cols, float stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, stddev);
  Matrix m(rows, cols);
  for (float& x : m.v) x = normal(rng);
  return m;
}

std::vector<std::uint16_t> to_bf16(const Matrix& m) {
  std::vector<std::uint16_t> out(m.v.size());
  for (std::size_t i = 0; i < m.v.size(); ++i) {
    const __nv_bfloat16 b = __float2bfloat16_rn(m.v[i]);
    std::memcpy(&out[i], &b, sizeof out[i]);
  }
  return out;
}

Matrix from_bf16(const std::vector<std::uint16_t>& bits, int rows, int cols) {
  Matrix m(rows, cols);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
    std::memcpy(&m.v[i], &u, sizeof u);
  }
  return m;
}

Fp8Tensor::Fp8Tensor(CastFormat format, int history) : format_(format), state_(delayed_recipe(history), format) {}

std::vector<std::uint8_t> Fp8Tensor::cast(const Matrix& m, float& scale_inv) {
  const float scale = state_.scale();
  scale_inv = 1.0f / scale;
  std::vector<std::uint8_t> codes(m.v.size());
  float amax = 0.0f;
  for (std::size_t i = 0; i < m.v.size(); ++i) {
    const float x = m.v[i];
    if (!std::isnan(x)) amax = std::fmax(amax, std::fabs(x));
    codes[i] = format_ == CastFormat::kE4M3 ? encode<kE4M3>(x * scale, Saturation::kSatFinite).code
                                           : encode<kE5M2>(x * scale, Saturation::kSatFinite).code;
  }
  state_.update(amax);
  return codes;
}

std::vector<std::uint8_t> cast_current_e4m3(const Matrix& m, float& scale_inv) {
  float amax = 0.0f;
  for (float x : m.v) {
    if (!std::isnan(x)) amax = std::fmax(amax, std::fabs(x));
  }
  const float scale = amax > 0.0f ? 448.0f / amax : 1.0f;
  scale_inv = 1.0f / scale;
  std::vector<std::uint8_t> codes(m.v.size());
  for (std::size_t i = 0; i < m.v.size(); ++i) codes[i] = encode<kE4M3>(m.v[i] * scale, Saturation::kSatFinite).code;
  return codes;
}

bool write_npy(const std::string& path, const std::string& descr, int rows, int cols, const void* data, std::size_t bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(magic), 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(out);
}

}  // namespace fp8scope::trainer
