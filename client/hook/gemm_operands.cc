#include "gemm_operands.h"

#include "real_api.h"

namespace fp8scope::hook {
namespace {

// cuBLASLt gained per-operand scale modes (block scales) in 12.8; before, FP8 scales are scalars.
constexpr std::size_t kFirstVersionWithScaleModes = 120800;

bool is_fp8(std::uint32_t wire_dtype) { return wire_dtype == 5 || wire_dtype == 6; }

OperandView stored_matrix(const void* data, const DTypeMapping& type, std::uint64_t rows, std::uint64_t cols,
                          std::int64_t ld, bool row_major, std::int32_t batch_count, std::int64_t batch_stride) {
  OperandView v;
  v.data = data;
  v.dtype = type.dtype;
  v.element_bytes = type.bytes;
  v.rows = rows;
  v.cols = cols;
  v.ld = ld;
  v.row_major = row_major;
  v.batch_count = batch_count;
  v.batch_stride = batch_stride;
  return v;
}

template <class T>
bool layout_attribute(const CublasLtApi& lt, cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, T& value) {
  std::size_t written = 0;
  return lt.layout_get(layout, attr, &value, sizeof value, &written) == CUBLAS_STATUS_SUCCESS && written == sizeof value;
}

template <class T>
bool desc_attribute(const CublasLtApi& lt, cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, T& value) {
  std::size_t written = 0;
  return lt.desc_get(desc, attr, &value, sizeof value, &written) == CUBLAS_STATUS_SUCCESS && written == sizeof value;
}

// One operand from its layout; nothing plus the reason when it cannot be copied as a tensor.
std::optional<OperandView> read_layout(const CublasLtApi& lt, cublasLtMatrixLayout_t layout, const void* data,
                                       shm::DropReason& reason) {
  std::uint32_t type = 0;
  std::int32_t order = CUBLASLT_ORDER_COL, batch_count = 1;
  std::uint32_t batch_mode = 0;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0, stride = 0;
  if (layout == nullptr || data == nullptr || !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_TYPE, type) ||
      !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_ROWS, rows) ||
      !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_COLS, cols) ||
      !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_LD, ld)) {
    reason = shm::kUnsupportedLayout;
    return std::nullopt;
  }
  // Attributes with defaults; older libraries may not know BATCH_MODE (then batches are strided).
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_ORDER, order);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, batch_mode);
  if (batch_mode == CUBLASLT_BATCH_MODE_POINTER_ARRAY) {
    reason = shm::kPointerArrayBatch;
    return std::nullopt;
  }
  const std::optional<DTypeMapping> dtype = map_dtype(static_cast<cudaDataType>(type));
  if (!dtype) {
    reason = shm::kUnsupportedDtype;
    return std::nullopt;
  }
  const bool row_major = order == CUBLASLT_ORDER_ROW;
  const std::uint64_t inner = row_major ? cols : rows;
  if ((order != CUBLASLT_ORDER_COL && !row_major) || rows == 0 || cols == 0 || batch_count < 1 ||
      ld < static_cast<std::int64_t>(inner)) {
    reason = shm::kUnsupportedLayout;
    return std::nullopt;
  }
  return stored_matrix(data, *dtype, rows, cols, ld, row_major, batch_count, stride);
}

// The FP8 scale of operand A or B: its device pointer, or the reason it cannot be used.
bool read_scale(const CublasLtApi& lt, cublasLtMatmulDesc_t desc, bool is_a, OperandView& v, shm::DropReason& reason) {
  if (!is_fp8(v.dtype)) return true;
  if (lt.version != nullptr && lt.version() >= kFirstVersionWithScaleModes) {
    std::int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    desc_attribute(lt, desc, is_a ? CUBLASLT_MATMUL_DESC_A_SCALE_MODE : CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    if (mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
      reason = shm::kBlockScales;
      return false;
    }
  }
  const void* pointer = nullptr;
  desc_attribute(lt, desc, is_a ? CUBLASLT_MATMUL_DESC_A_SCALE_POINTER : CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, pointer);
  v.scale_inv = static_cast<const float*>(pointer);
  v.scale_mode = kScaleModeTensorScalar;
  return true;
}

}  // namespace

Role role_from_layout(bool transa, bool transb) {
  if (transa && !transb) return Role::kFprop;
  if (!transa && !transb) return Role::kDgrad;
  if (!transa && transb) return Role::kWgrad;
  return Role::kUnknown;
}

OperandKind operand_of_a(Role role) { return role == Role::kWgrad ? OperandKind::kX : OperandKind::kW; }
OperandKind operand_of_b(Role role) {
  return role == Role::kDgrad || role == Role::kWgrad ? OperandKind::kDy : OperandKind::kX;
}

std::optional<DTypeMapping> map_dtype(cudaDataType type) {
  switch (type) {
    case CUDA_R_32F: return DTypeMapping{1, 4};
    case CUDA_R_16BF: return DTypeMapping{2, 2};
    case CUDA_R_16F: return DTypeMapping{3, 2};
    case CUDA_R_64F: return DTypeMapping{4, 8};
    case CUDA_R_8F_E4M3: return DTypeMapping{5, 1};
    case CUDA_R_8F_E5M2: return DTypeMapping{6, 1};
    default: return std::nullopt;
  }
}

ReadResult read_cublaslt_call(cublasLtMatmulDesc_t desc, const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, CUstream stream) {
  const CublasLtApi& lt = cublaslt_api();
  ReadResult r;
  if (lt.layout_get == nullptr || lt.desc_get == nullptr || desc == nullptr) {
    r.reason = shm::kUnsupportedLayout;
    return r;
  }
  std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_TRANSA, transa);
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_TRANSB, transb);
  std::optional<OperandView> a = read_layout(lt, Adesc, A, r.reason);
  if (!a || !read_scale(lt, desc, true, *a, r.reason)) return r;
  std::optional<OperandView> b = read_layout(lt, Bdesc, B, r.reason);
  if (!b || !read_scale(lt, desc, false, *b, r.reason)) return r;
  GemmCall call;
  call.source = "cublasLtMatmul";
  call.transa = transa != CUBLAS_OP_N;
  call.transb = transb != CUBLAS_OP_N;
  call.a = *a;
  call.b = *b;
  call.stream = stream;
  r.call = call;
  return r;
}

ReadResult read_cublas_call(const char* source, bool transa, bool transb, int m, int n, int k, const void* A,
                            cudaDataType Atype, int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                            long long strideB, int batch_count, CUstream stream) {
  ReadResult r;
  const std::optional<DTypeMapping> ta = map_dtype(Atype), tb = map_dtype(Btype);
  if (!ta || !tb) return r;  // kUnsupportedDtype
  // Stored shapes (column major): A is m x k (k x m when transposed), B is k x n (n x k).
  const auto dim = [](int d) { return static_cast<std::uint64_t>(d < 0 ? 0 : d); };
  const OperandView a = stored_matrix(A, *ta, dim(transa ? k : m), dim(transa ? m : k), lda, false, batch_count, strideA);
  const OperandView b = stored_matrix(B, *tb, dim(transb ? n : k), dim(transb ? k : n), ldb, false, batch_count, strideB);
  if (m <= 0 || n <= 0 || k <= 0 || batch_count < 1 || A == nullptr || B == nullptr ||
      a.ld < static_cast<std::int64_t>(a.rows) || b.ld < static_cast<std::int64_t>(b.rows)) {
    r.reason = shm::kUnsupportedLayout;
    return r;
  }
  GemmCall call;
  call.source = source;
  call.transa = transa;
  call.transb = transb;
  call.a = a;
  call.b = b;
  call.stream = stream;
  r.call = call;
  return r;
}

}  // namespace fp8scope::hook
