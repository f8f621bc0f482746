#include "fp8scope/hook/gemm_operands.h"

#include "fp8scope/kernels/scale_layout.h"
#include "fp8scope/hook/real_api.h"

namespace fp8scope::hook {
namespace {

// cuBLASLt gained per-operand scale modes in 12.8 (the VEC16/VEC32 block scales of MXFP8 and
// NVFP4) and the fp32 vector and block modes of Hopper's FP8 block scaling in 12.9; before, FP8
// scales are scalars. A mode the run-time library cannot have set is not trusted.
constexpr std::size_t kFirstVersionWithScaleModes = 120800;
constexpr std::size_t kFirstVersionWithFp32BlockModes = 120900;

std::optional<ScaleLayout> layout_of(std::int32_t mode, std::size_t version) {
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return ScaleLayout::kTensorScalar;
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3: return ScaleLayout::kVec16Ue4m3;
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: return ScaleLayout::kVec32Ue8m0;
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
      return version >= kFirstVersionWithFp32BlockModes ? std::optional(ScaleLayout::kRowVector) : std::nullopt;
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
      return version >= kFirstVersionWithFp32BlockModes ? std::optional(ScaleLayout::kVec128F32) : std::nullopt;
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
      return version >= kFirstVersionWithFp32BlockModes ? std::optional(ScaleLayout::kBlock128x128F32) : std::nullopt;
    default: return std::nullopt;
  }
}

bool is_codes(DType d) { return d == DType::kE4M3 || d == DType::kE5M2 || d == DType::kE2M1; }

OperandView stored_matrix(const void* data, const DTypeMapping& type, std::uint64_t rows, std::uint64_t cols,
                          std::int64_t ld, bool row_major, std::int32_t batch_count, std::int64_t batch_stride) {
  OperandView v;
  v.data = data;
  v.dtype = type.dtype;
  v.element_bits = type.bits;
  v.rows = rows;
  v.cols = cols;
  v.ld = ld;
  v.row_major = row_major;
  v.batch_count = batch_count;
  v.batch_stride = batch_stride;
  // Codes without a scale pointer are scaled by 1; cublasLtMatmul's descriptors may say otherwise.
  if (is_codes(type.dtype)) v.scale_layout = ScaleLayout::kTensorScalar;
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
// `rows` and `cols` come in already read (A's, by read_matmul_shape) or 0 to be read here.
std::optional<OperandView> read_layout(const CublasLtApi& lt, cublasLtMatrixLayout_t layout, const void* data,
                                       std::uint64_t rows, std::uint64_t cols, shm::DropReason& reason) {
  std::uint32_t type = 0;
  std::int32_t order = CUBLASLT_ORDER_COL, batch_count = 1;
  std::uint32_t batch_mode = 0;
  std::int64_t ld = 0, stride = 0;
  const bool known = rows != 0 && cols != 0;
  if (layout == nullptr || data == nullptr || !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_TYPE, type) ||
      (!known && !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_ROWS, rows)) ||
      (!known && !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_COLS, cols)) ||
      !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_LD, ld)) {
    reason = shm::DropReason::kUnsupportedLayout;
    return std::nullopt;
  }
  // Attributes with defaults; older libraries may not know BATCH_MODE (then batches are strided).
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_ORDER, order);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, batch_mode);
  if (batch_mode == CUBLASLT_BATCH_MODE_POINTER_ARRAY) {
    reason = shm::DropReason::kPointerArrayBatch;
    return std::nullopt;
  }
  const std::optional<DTypeMapping> dtype = map_dtype(static_cast<cudaDataType>(type));
  if (!dtype) {
    reason = shm::DropReason::kUnsupportedDtype;
    return std::nullopt;
  }
  const bool row_major = order == CUBLASLT_ORDER_ROW;
  const std::uint64_t inner = row_major ? cols : rows;
  // FP4 rows must be whole bytes: an odd inner dimension cannot be copied as a dense tensor.
  const bool whole_bytes = (inner * static_cast<std::uint64_t>(dtype->bits)) % 8 == 0 &&
                           (static_cast<std::uint64_t>(ld) * static_cast<std::uint64_t>(dtype->bits)) % 8 == 0;
  if ((order != CUBLASLT_ORDER_COL && !row_major) || rows == 0 || cols == 0 || batch_count < 1 ||
      ld < static_cast<std::int64_t>(inner) || !whole_bytes) {
    reason = shm::DropReason::kUnsupportedLayout;
    return std::nullopt;
  }
  return stored_matrix(data, *dtype, rows, cols, ld, row_major, batch_count, stride);
}

// The scales of operand A or B when it holds codes: the scale mode (gated on the run-time
// version), its device pointer and, for block modes, the size of the scale tensor and which way K
// runs. False and the reason when they cannot be copied.
bool read_scales(const CublasLtApi& lt, cublasLtMatmulDesc_t desc, bool is_a, const MatmulShape& shape, OperandView& v,
                 shm::DropReason& reason) {
  if (!is_codes(v.dtype)) return true;
  const std::size_t version = lt.version != nullptr ? lt.version() : 0;
  std::int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  if (version >= kFirstVersionWithScaleModes) {
    desc_attribute(lt, desc, is_a ? CUBLASLT_MATMUL_DESC_A_SCALE_MODE : CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
  }
  const std::optional<ScaleLayout> layout = layout_of(mode, version);
  if (!layout) {
    reason = shm::DropReason::kUnsupportedScaleMode;
    return false;
  }
  const void* pointer = nullptr;
  desc_attribute(lt, desc, is_a ? CUBLASLT_MATMUL_DESC_A_SCALE_POINTER : CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, pointer);
  v.scale_layout = *layout;
  v.scales = pointer;
  if (*layout == ScaleLayout::kTensorScalar) return true;
  // cuBLASLt needs a block scale tensor, and documents it per matrix: batches of block-scaled
  // operands are not copied.
  if (pointer == nullptr || v.batch_count != 1) {
    reason = shm::DropReason::kUnsupportedLayout;
    return false;
  }
  // K runs along the stored rows of A when it is transposed, of B when it is not (column major).
  const bool k_along_stored_rows = is_a ? shape.transa : !shape.transb;
  v.k_is_outer = k_along_stored_rows == v.row_major;
  v.scale_bytes = scale_tensor_bytes(
      *layout, ScaledShape{static_cast<std::int64_t>(v.outer()), static_cast<std::int64_t>(v.inner()), v.k_is_outer});
  return true;
}

// FP4 GEMMs: TE passes NVFP4's per-tensor scales folded into alpha (transformer_engine/common/gemm/
// cublaslt_gemm.cu: alpha *= amax_A * amax_B / (6 * 448)^2, a device pointer).
GemmAlpha read_alpha(const CublasLtApi& lt, cublasLtMatmulDesc_t desc, const void* alpha) {
  GemmAlpha a;
  std::int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST, scale_type = CUDA_R_32F;
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode);
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale_type);
  if (alpha == nullptr || scale_type != CUDA_R_32F) return a;
  if (pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) a.device = static_cast<const float*>(alpha);
  if (pointer_mode == CUBLASLT_POINTER_MODE_HOST) a.host = *static_cast<const float*>(alpha);
  return a;
}

}  // namespace

GemmRole role_from_layout(bool transa, bool transb) {
  if (transa && !transb) return GemmRole::kFprop;
  if (!transa && !transb) return GemmRole::kDgrad;
  if (!transa && transb) return GemmRole::kWgrad;
  return GemmRole::kUnknown;
}

Operand operand_of_a(GemmRole role) { return role == GemmRole::kWgrad ? Operand::kX : Operand::kW; }
Operand operand_of_b(GemmRole role) {
  return role == GemmRole::kDgrad || role == GemmRole::kWgrad ? Operand::kDy : Operand::kX;
}

std::optional<DTypeMapping> map_dtype(cudaDataType type) {
  switch (type) {
    case CUDA_R_32F: return DTypeMapping{DType::kF32, 32};
    case CUDA_R_16BF: return DTypeMapping{DType::kBF16, 16};
    case CUDA_R_16F: return DTypeMapping{DType::kF16, 16};
    case CUDA_R_64F: return DTypeMapping{DType::kF64, 64};
    case CUDA_R_8F_E4M3: return DTypeMapping{DType::kE4M3, 8};
    case CUDA_R_8F_E5M2: return DTypeMapping{DType::kE5M2, 8};
    case CUDA_R_4F_E2M1: return DTypeMapping{DType::kE2M1, 4};
    default: return std::nullopt;
  }
}

MatmulShape read_matmul_shape(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc) {
  const CublasLtApi& lt = cublaslt_api();
  MatmulShape s;
  if (lt.layout_get == nullptr || lt.desc_get == nullptr || desc == nullptr || Adesc == nullptr) return s;
  std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  layout_attribute(lt, Adesc, CUBLASLT_MATRIX_LAYOUT_ROWS, s.a_rows);
  layout_attribute(lt, Adesc, CUBLASLT_MATRIX_LAYOUT_COLS, s.a_cols);
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_TRANSA, transa);
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_TRANSB, transb);
  s.transa = transa != CUBLAS_OP_N;
  s.transb = transb != CUBLAS_OP_N;
  return s;
}

ReadResult read_cublaslt_call(const MatmulShape& shape, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              CUstream stream) {
  const CublasLtApi& lt = cublaslt_api();
  ReadResult r;
  if (lt.layout_get == nullptr || lt.desc_get == nullptr || desc == nullptr) {
    r.reason = shm::DropReason::kUnsupportedLayout;
    return r;
  }
  std::optional<OperandView> a = read_layout(lt, Adesc, A, shape.a_rows, shape.a_cols, r.reason);
  if (!a || !read_scales(lt, desc, true, shape, *a, r.reason)) return r;
  std::optional<OperandView> b = read_layout(lt, Bdesc, B, 0, 0, r.reason);
  if (!b || !read_scales(lt, desc, false, shape, *b, r.reason)) return r;
  GemmCall call;
  call.source = "cublasLtMatmul";
  call.transa = shape.transa;
  call.transb = shape.transb;
  call.a = *a;
  call.b = *b;
  if (a->dtype == DType::kE2M1 || b->dtype == DType::kE2M1) call.alpha = read_alpha(lt, desc, alpha);
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
    r.reason = shm::DropReason::kUnsupportedLayout;
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
