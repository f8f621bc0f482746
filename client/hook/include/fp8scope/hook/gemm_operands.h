// What one intercepted GEMM reads: its two input operands as the hook will copy them (the codes and,
// for FP8 and FP4, the scales the GEMM applies to them), and the role of the GEMM. Roles follow the
// layout (DESIGN.md): TN = fprop (A = W, B = X), NN = dgrad (A = W, B = Dy), NT = wgrad (A = X,
// B = Dy); a range name's suffix overrides it (layer_names.h).
#pragma once

#include <cublasLt.h>
#include <cuda.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "fp8scope/shm/shm_ring.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/scale_layout.h"

namespace fp8scope::hook {

// One expert's matrix of a batched or grouped GEMM, as the host knows it (column major unless the
// operand is row major).
struct ExpertShape {
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
};

// A cuBLASLt grouped layout's shapes, which only the device knows: device arrays of rows, cols and
// ld, one entry per group, int32 or int64 (CUBLASLT_GROUPED_MATRIX_LAYOUT_*).
struct DeviceDims {
  const void* rows = nullptr;
  const void* cols = nullptr;
  const void* ld = nullptr;
  bool rows_cols_64 = false, ld_64 = false;
  bool present() const { return rows != nullptr; }
};

// One stored input matrix, possibly a strided batch of them, or (experts > 0) one matrix per
// expert reached through a device array of device pointers.
struct OperandView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int element_bits = 0;              // 4 for FP4, whose codes come two a byte
  std::uint64_t rows = 0, cols = 0;  // as stored (cuBLAS: column major unless row_major)
  std::int64_t ld = 0;
  bool row_major = false;
  std::int32_t batch_count = 1;
  std::int64_t batch_stride = 0;  // elements
  // The scales of FP8 and FP4 codes: a device pointer to one fp32 scale_inv (kTensorScalar) or to
  // the scale tensor of scale_bytes bytes, laid out as cuBLASLt reads it (scale_layout.h); null
  // for a scalar means 1. k_is_outer: the GEMM's K runs along outer(), not along the contiguous
  // inner() (block scales run along K).
  ScaleLayout scale_layout = ScaleLayout::kNone;
  const void* scales = nullptr;
  std::uint64_t scale_bytes = 0;
  bool k_is_outer = false;
  // Pointer-array and grouped GEMMs: `data` is a device array of `experts` matrix pointers. Their
  // shape is rows/cols/ld for all, or expert_shapes[e] each, or on the device (device_dims, the
  // host's rows and cols then 0). scales_per_expert: `scales` is a device array of pointers, one
  // per expert, to its fp32 scale_inv (CUBLASLT_MATMUL_MATRIX_SCALE_PER_BATCH_SCALAR_32F) or, in a
  // block layout, to its scale tensor (sized from the expert's shape on the device).
  std::uint32_t experts = 0;
  std::vector<ExpertShape> expert_shapes;
  DeviceDims device_dims;
  bool scales_per_expert = false;

  ExpertShape shape_of(std::uint32_t expert) const {
    return expert < expert_shapes.size() ? expert_shapes[expert] : ExpertShape{rows, cols, ld};
  }

  // The matrix as a row-major tensor: `outer` rows of `inner` contiguous elements.
  std::uint64_t inner() const { return row_major ? cols : rows; }
  std::uint64_t outer() const { return row_major ? rows : cols; }
  std::uint64_t matrix_bytes() const { return inner() * outer() * static_cast<std::uint64_t>(element_bits) / 8; }
  // Codes and, after them, the scale tensor: what a sample of this operand carries.
  std::uint64_t payload_bytes() const {
    return static_cast<std::uint64_t>(batch_count) * matrix_bytes() + (scale_layout == ScaleLayout::kTensorScalar ? 0 : scale_bytes);
  }
};

// The GEMM's alpha, as TE passes NVFP4's per-tensor scales (the product of both operands'); read
// only for FP4 GEMMs.
struct GemmAlpha {
  const float* device = nullptr;  // CUBLASLT_POINTER_MODE_DEVICE: copied with the operands
  float host = 0.0f;              // CUBLASLT_POINTER_MODE_HOST: read at the call
  // Grouped GEMMs with CUBLASLT_MATMUL_DESC_ALPHA_BATCH_STRIDE 1: a device array of pointers to
  // each group's alpha.
  const void* per_expert = nullptr;
};

struct GemmCall {
  const char* source = "";  // the interposed entry point
  bool transa = false, transb = false;
  OperandView a, b;
  GemmAlpha alpha;
  CUstream stream = nullptr;
  // Batched and grouped GEMMs: the experts (batch elements, problems or groups).
  std::uint32_t experts = 0;
  // What the call writes (cuBLASLt's D, cuBLAS's C), copied after the call when a policy asks; the
  // reason when it cannot be (an expert GEMM's, codes: their scales are not read).
  std::optional<OperandView> d;
  shm::DropReason d_reason = shm::DropReason::kOutputUnsupported;
};

// Layout role: TN fprop, NN dgrad, NT wgrad, TT unknown.
GemmRole role_from_layout(bool transa, bool transb);

// Whether the GEMM's K runs along an operand's outer (non-contiguous) dimension: A's or B's, by the
// call's transposes and the operand's order.
bool k_runs_outer(bool is_a, bool transa, bool transb, bool row_major);

// Where an MoE GEMM's tokens run: along b's N in fprop and dgrad (X, Dy), along K in wgrad. Whether
// they are b's (cuBLAS) columns, and whether they run along an operand's outer dimension, its rows
// as a tensor, which a grouped GEMM pads.
constexpr bool tokens_in_b_cols(GemmRole role, bool transb) { return (role == GemmRole::kWgrad) == transb; }
bool tokens_run_outer(GemmRole role, bool is_a, bool transa, bool transb, bool row_major);

// The tokens routed to each expert of a batched or grouped call where the host knows the shapes
// (b's, per tokens_in_b_cols); empty for grouped layouts, whose shapes the device holds.
std::vector<std::uint64_t> host_tokens(const GemmCall& call, GemmRole role);

// Which tensor A and B hold for a role (unknown GEMMs are labelled like fprop).
Operand operand_of_a(GemmRole role);
Operand operand_of_b(GemmRole role);

// cudaDataType -> wire DType and element size; nothing for types the statistics do not cover.
struct DTypeMapping {
  DType dtype;
  int bits;
};
std::optional<DTypeMapping> map_dtype(cudaDataType type);

// The descriptor attributes every sampled call reads first (the step clock reads them too).
struct MatmulShape {
  std::uint64_t a_rows = 0, a_cols = 0;
  bool transa = false, transb = false;
};
MatmulShape read_matmul_shape(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc);

// Reads cublasLtMatmul's descriptors. Either the call, or the reason it cannot be sampled.
struct ReadResult {
  std::optional<GemmCall> call;
  shm::DropReason reason = shm::DropReason::kUnsupportedDtype;
};
ReadResult read_cublaslt_call(const MatmulShape& shape, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* D,
                              cublasLtMatrixLayout_t Ddesc, CUstream stream);

// The same for cublasGemmEx / cublasGemmStridedBatchedEx arguments (strides in elements), C the
// output (m x n).
struct CublasOutput {
  const void* c = nullptr;
  cudaDataType type = CUDA_R_32F;
  long long ldc = 0, stride = 0;
};
ReadResult read_cublas_call(const char* source, bool transa, bool transb, int m, int n, int k, const void* A,
                            cudaDataType Atype, int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                            long long strideB, const CublasOutput& C, int batch_count, CUstream stream);

// cublasGemmBatchedEx: one shape for all, matrices through device pointer arrays.
ReadResult read_cublas_batched_call(const char* source, bool transa, bool transb, std::int64_t m, std::int64_t n,
                                    std::int64_t k, const void* Aarray, cudaDataType Atype, std::int64_t lda,
                                    const void* Barray, cudaDataType Btype, std::int64_t ldb, std::int64_t batch_count,
                                    CUstream stream);

// cublasGemmGroupedBatchedEx's host arrays, one entry per group, widened from int or int64.
struct GroupedProblems {
  std::vector<bool> transa, transb;
  std::vector<std::int64_t> m, n, k, lda, ldb, group_size;
};
ReadResult read_cublas_grouped_call(const char* source, const GroupedProblems& groups, const void* Aarray,
                                    cudaDataType Atype, const void* Barray, cudaDataType Btype, CUstream stream);

}  // namespace fp8scope::hook
