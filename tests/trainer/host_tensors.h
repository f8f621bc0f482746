// Host-side tensors of tiny_trainer: row-major fp32 matrices, their BF16 and FP8 (delayed scaling)
// encodings as a GEMM reads them, and .npy dumps of exactly those bytes.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fp8scope/kernels/delayed_scaling.h"

namespace fp8scope::trainer {

struct Matrix {
  int rows = 0, cols = 0;
  std::vector<float> v;  // row-major

  Matrix() = default;
  Matrix(int r, int c) : rows(r), cols(c), v(static_cast<std::size_t>(r) * c, 0.0f) {}
  float& at(int r, int c) { return v[static_cast<std::size_t>(r) * cols + c]; }
  float at(int r, int c) const { return v[static_cast<std::size_t>(r) * cols + c]; }
  Matrix transposed() const;
};

Matrix random_normal(int rows, int cols, float stddev, std::mt19937_64& rng);

// BF16 bits, round to nearest even (cuda_bf16.h's host conversion).
std::vector<std::uint16_t> to_bf16(const Matrix& m);
Matrix from_bf16(const std::vector<std::uint16_t>& bits, int rows, int cols);

// One tensor under TE's delayed scaling: this step's cast uses the scale from the history; the
// tensor's amax then enters the history (DelayedScalingState keeps TE's order).
class Fp8Tensor {
 public:
  Fp8Tensor(CastFormat format, int history);
  // Codes of m * scale (satfinite), and scale_inv; records m's amax for the next scale.
  std::vector<std::uint8_t> cast(const Matrix& m, float& scale_inv);
  CastFormat format() const { return format_; }

 private:
  CastFormat format_;
  DelayedScalingState state_;
};

// E4M3 codes of m under per-tensor current scaling (scale = RN(448 / amax), as TE and a
// post-training export choose it), and the scale_inv: how an FP8 inference job casts.
std::vector<std::uint8_t> cast_current_e4m3(const Matrix& m, float& scale_inv);

// Writes a 2-D .npy of raw elements: "<u2" for BF16 bits, "|u1" for FP8 codes, "<f4" for fp32.
bool write_npy(const std::string& path, const std::string& descr, int rows, int cols, const void* data, std::size_t bytes);

}  // namespace fp8scope::trainer
