// What one intercepted GEMM reads: its two input operands as the hook will copy them, and the role
// of the GEMM. Roles follow the layout (DESIGN.md): TN = fprop (A = W, B = X), NN = dgrad (A = W,
// B = Dy), NT = wgrad (A = X, B = Dy); a range name's suffix overrides it (layer_names.h).
#pragma once

#include <cublasLt.h>
#include <cuda.h>

#include <cstdint>
#include <optional>

#include "fp8scope/shm_ring.h"

namespace fp8scope::hook {

// Wire values of proto/fp8scope/v1 (Gemm, Operand, DType, ScaleMode), spelled out because the
// hook links no protobuf.
enum class Role : std::uint32_t { kFprop = 1, kDgrad = 2, kWgrad = 3, kUnknown = 4 };
enum class OperandKind : std::uint32_t { kX = 1, kW = 2, kDy = 3 };
inline constexpr std::uint32_t kScaleModeNone = 1, kScaleModeTensorScalar = 2;

// One stored input matrix, possibly a strided batch of them.
struct OperandView {
  const void* data = nullptr;
  std::uint32_t dtype = 0;  // wire DType
  int element_bytes = 0;
  std::uint64_t rows = 0, cols = 0;  // as stored (cuBLAS: column major unless row_major)
  std::int64_t ld = 0;
  bool row_major = false;
  std::int32_t batch_count = 1;
  std::int64_t batch_stride = 0;           // elements
  const float* scale_inv = nullptr;        // device pointer (FP8 operands), null = 1
  std::uint32_t scale_mode = kScaleModeNone;

  // The matrix as a row-major tensor: `outer` rows of `inner` contiguous elements.
  std::uint64_t inner() const { return row_major ? cols : rows; }
  std::uint64_t outer() const { return row_major ? rows : cols; }
  std::uint64_t payload_bytes() const {
    return static_cast<std::uint64_t>(batch_count) * inner() * outer() * static_cast<std::uint64_t>(element_bytes);
  }
};

struct GemmCall {
  const char* source = "";  // the interposed entry point
  bool transa = false, transb = false;
  OperandView a, b;
  CUstream stream = nullptr;
};

// Layout role: TN fprop, NN dgrad, NT wgrad, TT unknown.
Role role_from_layout(bool transa, bool transb);

// Which tensor A and B hold for a role (unknown GEMMs are labelled like fprop).
OperandKind operand_of_a(Role role);
OperandKind operand_of_b(Role role);

// cudaDataType -> wire DType and element size; nothing for types the statistics do not cover.
struct DTypeMapping {
  std::uint32_t dtype;
  int bytes;
};
std::optional<DTypeMapping> map_dtype(cudaDataType type);

// Reads cublasLtMatmul's descriptors. Either the call, or the reason it cannot be sampled.
struct ReadResult {
  std::optional<GemmCall> call;
  shm::DropReason reason = shm::kUnsupportedDtype;
};
ReadResult read_cublaslt_call(cublasLtMatmulDesc_t desc, const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, CUstream stream);

// The same for cublasGemmEx / cublasGemmStridedBatchedEx arguments (strides in elements).
ReadResult read_cublas_call(const char* source, bool transa, bool transb, int m, int n, int k, const void* A,
                            cudaDataType Atype, int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                            long long strideB, int batch_count, CUstream stream);

}  // namespace fp8scope::hook
