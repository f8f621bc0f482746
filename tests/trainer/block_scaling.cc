#include "block_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "support/cublas_scale_layouts.h"
#include "fp8scope/kernels/stats_engine.h"

namespace fp8scope::trainer {
namespace {

namespace doc = fp8scope::testing::cublas_layout;

struct ModeRow {
  BlockMode mode;
  RecipeKind recipe;
  Operand operand;  // which block shape the recipe gives (NVFP4 weights: 16x16)
  cublasLtMatmulMatrixScale_t scale_mode;
};

constexpr ModeRow kModes[] = {
    {BlockMode::kMxfp8, RecipeKind::kMxfp8, Operand::kX, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0},
    {BlockMode::kBlock1d, RecipeKind::kBlock1x128, Operand::kX, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F},
    {BlockMode::kBlock2d, RecipeKind::kBlock128x128, Operand::kW, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F},
    {BlockMode::kNvfp4, RecipeKind::kNvfp4, Operand::kX, CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3},
    {BlockMode::kNvfp4Weight, RecipeKind::kNvfp4, Operand::kW, CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3},
    {BlockMode::kNvfp4Row, RecipeKind::kNvfp4Row, Operand::kX, CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3},
};

const ModeRow& row_of(BlockMode mode) {
  return *std::find_if(std::begin(kModes), std::end(kModes), [&](const ModeRow& r) { return r.mode == mode; });
}

float amax_of(const Matrix& m, int r0, int r1, int c0, int c1) {
  float a = 0.0f;
  for (int r = r0; r < std::min(r1, m.rows); ++r)
    for (int c = c0; c < std::min(c1, m.cols); ++c) {
      const float v = std::fabs(m.at(r, c));
      if (!std::isnan(v)) a = std::max(a, v);
    }
  return a;
}

std::uint8_t encode_as(CastFormat f, float y) {
  return f == CastFormat::kE2M1 ? encode<kE2M1>(y, Saturation::kSatFinite).code
                                : encode<kE4M3>(y, Saturation::kSatFinite).code;
}

}  // namespace

BlockQuantized quantize_for_gemm(const Matrix& m, BlockMode mode) {
  const ModeRow& row = row_of(mode);
  const Recipe recipe = default_recipe(row.recipe);
  const CastFormat format = recipe.format_for(row.operand);
  const QuantSpec spec = quant_spec_for(recipe, format, row.operand, std::nullopt).value();
  const float tensor_amax = amax_of(m, 0, m.rows, 0, m.cols);
  const BlockRule rule = block_rule_for(spec, tensor_amax);
  const int br = spec.block_rows, bc = spec.block_cols;
  const int mn_blocks = (m.rows + br - 1) / br, k_blocks = (m.cols + bc - 1) / bc;

  BlockQuantized q;
  q.scale_mode = row.scale_mode;
  q.amax = tensor_amax;
  if (spec.row_scaled) {
    for (int r = 0; r < m.rows; ++r) q.row_amax.push_back(amax_of(m, r, r + 1, 0, m.cols));
  }
  q.codes.assign(format == CastFormat::kE2M1 ? m.v.size() / 2 : m.v.size(), 0);
  std::vector<float> block_scale_inv(static_cast<std::size_t>(mn_blocks * k_blocks));
  std::vector<std::uint8_t> block_code(block_scale_inv.size());
  for (int p = 0; p < mn_blocks; ++p)
    for (int b = 0; b < k_blocks; ++b) {
      const float amax = amax_of(m, p * br, (p + 1) * br, b * bc, (b + 1) * bc);
      const BlockRule block_rule = spec.row_scaled ? nvfp4_rule(q.row_amax[static_cast<std::size_t>(p)]) : rule;
      const ScalePair s = block_scale(block_rule, amax);
      const std::size_t at = static_cast<std::size_t>(p * k_blocks + b);
      block_scale_inv[at] = s.scale_inv;
      block_code[at] = rule.kind == BlockRule::kE8M0 ? mx_block_exponent(amax, rule.fmax_reciprocal)
                                                     : nvfp4_block_scale_code(block_rule, amax);
      for (int r = p * br; r < std::min((p + 1) * br, m.rows); ++r)
        for (int c = b * bc; c < std::min((b + 1) * bc, m.cols); ++c) {
          const std::size_t i = static_cast<std::size_t>(r) * m.cols + c;
          const std::uint8_t code = encode_as(format, m.v[i] * s.scale);
          if (format == CastFormat::kE2M1) {
            q.codes[i / 2] |= static_cast<std::uint8_t>(code << (4 * (i % 2)));
          } else {
            q.codes[i] = code;
          }
        }
    }
  switch (row.scale_mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: {
      const std::vector<float> laid = row.scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                          ? doc::vec128(block_scale_inv, mn_blocks, k_blocks)
                                          : doc::blk128x128(block_scale_inv, mn_blocks, k_blocks);
      q.scales.resize(laid.size() * sizeof(float));
      std::memcpy(q.scales.data(), laid.data(), q.scales.size());
      break;
    }
    default: {
      // 1-byte scales, one row per row of the matrix (a 16x16 block repeats its scale on each row).
      std::vector<std::uint8_t> per_row(static_cast<std::size_t>(m.rows * k_blocks));
      for (int r = 0; r < m.rows; ++r)
        for (int b = 0; b < k_blocks; ++b) per_row[static_cast<std::size_t>(r * k_blocks + b)] = block_code[(r / br) * k_blocks + b];
      q.scales = doc::tile_128x4(per_row, m.rows, k_blocks);
      break;
    }
  }
  return q;
}

float nvfp4_gemm_alpha(float amax_a, float amax_b) {
  const float factor_inv = 1.0f / (6.0f * 6.0f * 448.0f * 448.0f);
  return 1.0f * amax_a * amax_b * factor_inv;
}

float nvfp4_gemm_alpha(const BlockQuantized& a, const BlockQuantized& b) {
  return a.row_scaled() || b.row_scaled() ? nvfp4_gemm_alpha(1.0f, 1.0f) : nvfp4_gemm_alpha(a.amax, b.amax);
}

void apply_row_scales(Matrix& out, const BlockQuantized& a, const BlockQuantized& b) {
  if (!a.row_scaled() && !b.row_scaled()) return;
  for (int p = 0; p < out.rows; ++p)
    for (int q = 0; q < out.cols; ++q) {
      const float bp = b.row_scaled() ? b.row_amax[static_cast<std::size_t>(p)] : b.amax;
      const float aq = a.row_scaled() ? a.row_amax[static_cast<std::size_t>(q)] : a.amax;
      out.v[static_cast<std::size_t>(p) * out.cols + q] *= bp * aq;
    }
}

}  // namespace fp8scope::trainer
