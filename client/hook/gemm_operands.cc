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

// cuBLASLt's grouped GEMM (experimental since cuBLAS 13.2.0, CUDA 13.1 release notes), newer than
// the installed 13.1 headers. Values from NVIDIA's cuBLASLt API documentation (cublasLtBatchMode_t,
// cublasLtMatrixLayoutAttribute_t, cublasLtMatmulMatrixScale_t, cublasLtMatmulDescAttributes_t)
// as NVIDIA's generated bindings carry them (nvmath-python nvmath/bindings/cycublasLt.pxd:730-734,
// 770, 943, 948); Transformer Engine uses them as declared there
// (transformer_engine/common/gemm/cublaslt_grouped_gemm.cu:817-975).
constexpr std::size_t kFirstVersionWithGroupedLayouts = 130200;
constexpr std::uint32_t kBatchModeGrouped = 2;  // CUBLASLT_BATCH_MODE_GROUPED
constexpr auto kGroupedRowsArray = static_cast<cublasLtMatrixLayoutAttribute_t>(9);
constexpr auto kGroupedColsArray = static_cast<cublasLtMatrixLayoutAttribute_t>(10);
constexpr auto kGroupedLdArray = static_cast<cublasLtMatrixLayoutAttribute_t>(11);
constexpr auto kGroupedRowsColsWidth = static_cast<cublasLtMatrixLayoutAttribute_t>(12);  // cublasLtIntegerWidth_t
constexpr auto kGroupedLdWidth = static_cast<cublasLtMatrixLayoutAttribute_t>(13);
constexpr std::int32_t kIntegerWidth64 = 1;                // CUBLASLT_INTEGER_WIDTH_64 (32 is 0, the default)
constexpr std::int32_t kScalePerBatchScalar32F = 6;        // CUBLASLT_MATMUL_MATRIX_SCALE_PER_BATCH_SCALAR_32F
constexpr auto kAlphaBatchStride = static_cast<cublasLtMatmulDescAttributes_t>(39);  // int64_t, 0 or 1

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

// A grouped layout: one matrix per group, shapes in device arrays (cublasLtGroupedMatrixLayoutInit
// and ...Create set the batch mode and count; the arrays are attributes 9-11, their integer widths
// 12-13). Column major only, as cuBLASLt requires of grouped layouts.
std::optional<OperandView> read_grouped_layout(const CublasLtApi& lt, cublasLtMatrixLayout_t layout, const void* data,
                                               const DTypeMapping& type, std::int32_t order, std::int32_t groups,
                                               shm::DropReason& reason) {
  DeviceDims dims;
  std::int32_t rows_cols_width = 0, ld_width = 0;
  layout_attribute(lt, layout, kGroupedRowsColsWidth, rows_cols_width);
  layout_attribute(lt, layout, kGroupedLdWidth, ld_width);
  if (!layout_attribute(lt, layout, kGroupedRowsArray, dims.rows) || !layout_attribute(lt, layout, kGroupedColsArray, dims.cols) ||
      !layout_attribute(lt, layout, kGroupedLdArray, dims.ld) || !dims.rows || !dims.cols || !dims.ld ||
      order != CUBLASLT_ORDER_COL || groups < 1) {
    reason = shm::DropReason::kUnreadableBatch;
    return std::nullopt;
  }
  dims.rows_cols_64 = rows_cols_width == kIntegerWidth64;
  dims.ld_64 = ld_width == kIntegerWidth64;
  OperandView v = stored_matrix(data, type, 0, 0, 0, false, 1, 0);
  v.experts = static_cast<std::uint32_t>(groups);
  v.device_dims = dims;
  return v;
}

// One operand from its layout; nothing plus the reason when it cannot be copied as a tensor.
// `rows` and `cols` come in already read (A's, by read_matmul_shape) or 0 to be read here. A
// pointer-array batch or grouped layout gives one matrix per expert; any other batch mode is
// counted, never read as a plain matrix (its "matrix" would be an array of pointers).
std::optional<OperandView> read_layout(const CublasLtApi& lt, cublasLtMatrixLayout_t layout, const void* data,
                                       std::uint64_t rows, std::uint64_t cols, shm::DropReason& reason) {
  std::uint32_t type = 0;
  std::int32_t order = CUBLASLT_ORDER_COL, batch_count = 1;
  std::uint32_t batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
  std::int64_t ld = 0, stride = 0;
  if (layout == nullptr || data == nullptr || !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_TYPE, type)) {
    reason = shm::DropReason::kUnsupportedLayout;
    return std::nullopt;
  }
  // Attributes with defaults; older libraries may not know BATCH_MODE (then batches are strided).
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_ORDER, order);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, batch_mode);
  const std::optional<DTypeMapping> dtype = map_dtype(static_cast<cudaDataType>(type));
  const std::size_t version = lt.version != nullptr ? lt.version() : 0;
  const bool grouped = batch_mode == kBatchModeGrouped && version >= kFirstVersionWithGroupedLayouts;
  if (!grouped && batch_mode != CUBLASLT_BATCH_MODE_STRIDED && batch_mode != CUBLASLT_BATCH_MODE_POINTER_ARRAY) {
    reason = shm::DropReason::kUnreadableBatch;
    return std::nullopt;
  }
  if (!dtype) {
    reason = shm::DropReason::kUnsupportedDtype;
    return std::nullopt;
  }
  if (grouped) return read_grouped_layout(lt, layout, data, *dtype, order, batch_count, reason);
  const bool known = rows != 0 && cols != 0;
  if ((!known && !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_ROWS, rows)) ||
      (!known && !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_COLS, cols)) ||
      !layout_attribute(lt, layout, CUBLASLT_MATRIX_LAYOUT_LD, ld)) {
    reason = shm::DropReason::kUnsupportedLayout;
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
  if (batch_mode == CUBLASLT_BATCH_MODE_POINTER_ARRAY) {  // one shape, a device array of matrix pointers
    OperandView v = stored_matrix(data, *dtype, rows, cols, ld, row_major, 1, 0);
    v.experts = static_cast<std::uint32_t>(batch_count);
    return v;
  }
  return stored_matrix(data, *dtype, rows, cols, ld, row_major, batch_count, stride);
}

// The scales of a batched or grouped operand's codes: one scale_inv for all (pointer arrays allow
// tensor-wide scaling only), or per group (grouped layouts: a device array of pointers, each to
// the group's fp32 scale_inv under PER_BATCH_SCALAR_32F, or to its scale tensor in a block mode,
// as Transformer Engine sets them, transformer_engine/common/gemm/cublaslt_grouped_gemm.cu:867-975).
bool read_expert_scales(const CublasLtApi& lt, cublasLtMatmulDesc_t desc, bool is_a, const MatmulShape& shape,
                        std::int32_t mode, std::size_t version, OperandView& v, shm::DropReason& reason) {
  const void* pointer = nullptr;
  desc_attribute(lt, desc, is_a ? CUBLASLT_MATMUL_DESC_A_SCALE_POINTER : CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, pointer);
  const bool grouped = v.device_dims.present();
  const std::optional<ScaleLayout> block = layout_of(mode, version);
  const bool per_group_blocks = grouped && block && is_block_layout(*block);
  const bool per_group = (mode == kScalePerBatchScalar32F && grouped) || per_group_blocks;
  if (mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && !per_group) {
    // Block scales of a pointer-array batch: cuBLASLt documents them per matrix only.
    reason = block && is_block_layout(*block) ? shm::DropReason::kGroupedBlockScales : shm::DropReason::kUnsupportedScaleMode;
    return false;
  }
  if (per_group && pointer == nullptr) {
    reason = shm::DropReason::kUnreadableBatch;
    return false;
  }
  v.scale_layout = per_group_blocks ? *block : ScaleLayout::kTensorScalar;
  v.scales = pointer;
  v.scales_per_expert = per_group;
  v.k_is_outer = per_group_blocks && k_runs_outer(is_a, shape.transa, shape.transb, v.row_major);
  return true;
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
  if (v.experts > 0) return read_expert_scales(lt, desc, is_a, shape, mode, version, v, reason);
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
  v.k_is_outer = k_runs_outer(is_a, shape.transa, shape.transb, v.row_major);
  v.scale_bytes = scale_tensor_bytes(
      *layout, ScaledShape{static_cast<std::int64_t>(v.outer()), static_cast<std::int64_t>(v.inner()), v.k_is_outer});
  return true;
}

// FP4 GEMMs: TE passes NVFP4's per-tensor scales folded into alpha (transformer_engine/common/gemm/
// cublaslt_gemm.cu: alpha *= amax_A * amax_B / (6 * 448)^2, a device pointer).
// Grouped GEMMs may give each group its own alpha (ALPHA_BATCH_STRIDE 1: alpha is then a device
// array of pointers, in device pointer mode).
GemmAlpha read_alpha(const CublasLtApi& lt, cublasLtMatmulDesc_t desc, const void* alpha, bool grouped) {
  GemmAlpha a;
  std::int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST, scale_type = CUDA_R_32F;
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode);
  desc_attribute(lt, desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale_type);
  if (alpha == nullptr || scale_type != CUDA_R_32F) return a;
  std::int64_t alpha_stride = 0;
  if (grouped) desc_attribute(lt, desc, kAlphaBatchStride, alpha_stride);
  if (alpha_stride == 1 && pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) {
    a.per_expert = alpha;
    return a;
  }
  if (pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) a.device = static_cast<const float*>(alpha);
  if (pointer_mode == CUBLASLT_POINTER_MODE_HOST) a.host = *static_cast<const float*>(alpha);
  return a;
}

// A call's output as a tensor: one matrix or a strided batch of high-precision values. Codes are
// not copied: their scale (D_SCALE, the amax it writes) is not read.
void set_output(GemmCall& call, std::optional<OperandView> d, shm::DropReason reason) {
  if (d && (d->experts != 0 || d->device_dims.present() || is_codes(d->dtype))) {
    d.reset();
    reason = shm::DropReason::kOutputUnsupported;
  }
  call.d = d;
  call.d_reason = reason;
}

// A call of the operands a reader found; alpha, experts and tokens are the reader's to add.
GemmCall gemm_call(const char* source, bool transa, bool transb, const OperandView& a, const OperandView& b,
                   CUstream stream) {
  GemmCall call;
  call.source = source;
  call.transa = transa;
  call.transb = transb;
  call.a = a;
  call.b = b;
  call.stream = stream;
  return call;
}

}  // namespace

GemmRole role_from_layout(bool transa, bool transb) {
  if (transa && !transb) return GemmRole::kFprop;
  if (!transa && !transb) return GemmRole::kDgrad;
  if (!transa && transb) return GemmRole::kWgrad;
  return GemmRole::kUnknown;
}

bool k_runs_outer(bool is_a, bool transa, bool transb, bool row_major) {
  // K runs along the stored rows of A when it is transposed, of B when it is not (column major:
  // the rows are contiguous, so the outer dimension is the columns).
  const bool k_along_stored_rows = is_a ? transa : !transb;
  return k_along_stored_rows == row_major;
}

bool tokens_run_outer(GemmRole role, bool is_a, bool transa, bool transb, bool row_major) {
  return (role == GemmRole::kWgrad) == k_runs_outer(is_a, transa, transb, row_major);
}

std::vector<std::uint64_t> host_tokens(const GemmCall& call, GemmRole role) {
  std::vector<std::uint64_t> tokens;
  if (call.experts == 0 || call.b.device_dims.present()) return tokens;
  const bool in_cols = tokens_in_b_cols(role, call.transb);
  for (std::uint32_t e = 0; e < call.experts; ++e) {
    const ExpertShape s = call.b.shape_of(e);
    tokens.push_back(in_cols ? s.cols : s.rows);
  }
  return tokens;
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
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* D,
                              cublasLtMatrixLayout_t Ddesc, CUstream stream) {
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
  // cuBLASLt infers the batch mode from the layouts, which must agree (cuBLASLt API, "the batch
  // mode ... must all be the same").
  if (a->experts != b->experts || a->device_dims.present() != b->device_dims.present()) {
    r.reason = shm::DropReason::kUnreadableBatch;
    return r;
  }
  GemmCall call = gemm_call("cublasLtMatmul", shape.transa, shape.transb, *a, *b, stream);
  const bool grouped = b->device_dims.present();
  if (a->dtype == DType::kE2M1 || b->dtype == DType::kE2M1) call.alpha = read_alpha(lt, desc, alpha, grouped);
  call.experts = b->experts;
  shm::DropReason d_reason = shm::DropReason::kOutputUnsupported;
  const std::optional<OperandView> d = read_layout(lt, Ddesc, D, 0, 0, d_reason);
  set_output(call, d, d_reason);
  r.call = call;
  return r;
}

namespace {

// A cuBLAS call's stored A and B (column major: A is m x k, k x m when transposed; B is k x n, n x k),
// `stored` matrices of each `stride` apart, for a call of `batch_count`.
ReadResult cublas_operands(const char* source, bool transa, bool transb, std::int64_t m, std::int64_t n, std::int64_t k,
                           const void* A, cudaDataType Atype, std::int64_t lda, long long strideA, const void* B,
                           cudaDataType Btype, std::int64_t ldb, long long strideB, std::int64_t stored,
                           std::int64_t batch_count, CUstream stream) {
  ReadResult r;
  const std::optional<DTypeMapping> ta = map_dtype(Atype), tb = map_dtype(Btype);
  if (!ta || !tb) return r;  // kUnsupportedDtype
  const auto dim = [](std::int64_t d) { return static_cast<std::uint64_t>(d < 0 ? 0 : d); };
  const OperandView a = stored_matrix(A, *ta, dim(transa ? k : m), dim(transa ? m : k), lda, false, stored, strideA);
  const OperandView b = stored_matrix(B, *tb, dim(transb ? n : k), dim(transb ? k : n), ldb, false, stored, strideB);
  if (m <= 0 || n <= 0 || k <= 0 || batch_count < 1 || batch_count > 0xFFFFFFFFll || A == nullptr || B == nullptr ||
      a.ld < static_cast<std::int64_t>(a.rows) || b.ld < static_cast<std::int64_t>(b.rows)) {
    r.reason = shm::DropReason::kUnsupportedLayout;
    return r;
  }
  r.call = gemm_call(source, transa, transb, a, b, stream);
  return r;
}

}  // namespace

ReadResult read_cublas_call(const char* source, bool transa, bool transb, int m, int n, int k, const void* A,
                            cudaDataType Atype, int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                            long long strideB, const CublasOutput& C, int batch_count, CUstream stream) {
  ReadResult r = cublas_operands(source, transa, transb, m, n, k, A, Atype, lda, strideA, B, Btype, ldb, strideB,
                                 batch_count, batch_count, stream);
  if (!r.call) return r;
  const std::optional<DTypeMapping> type = map_dtype(C.type);
  if (!type) {
    set_output(*r.call, std::nullopt, shm::DropReason::kUnsupportedDtype);
  } else if (C.c == nullptr || C.ldc < m) {
    set_output(*r.call, std::nullopt, shm::DropReason::kUnsupportedLayout);
  } else {
    set_output(*r.call, stored_matrix(C.c, *type, static_cast<std::uint64_t>(m), static_cast<std::uint64_t>(n), C.ldc,
                                      false, batch_count, C.stride),
               shm::DropReason::kOutputUnsupported);
  }
  return r;
}

ReadResult read_cublas_batched_call(const char* source, bool transa, bool transb, std::int64_t m, std::int64_t n,
                                    std::int64_t k, const void* Aarray, cudaDataType Atype, std::int64_t lda,
                                    const void* Barray, cudaDataType Btype, std::int64_t ldb, std::int64_t batch_count,
                                    CUstream stream) {
  // The pointer arrays stand where the matrices would: one stored matrix, one expert per element.
  ReadResult r = cublas_operands(source, transa, transb, m, n, k, Aarray, Atype, lda, 0, Barray, Btype, ldb, 0, 1,
                                 batch_count, stream);
  if (!r.call) return r;
  GemmCall& call = *r.call;
  call.a.experts = call.b.experts = call.experts = static_cast<std::uint32_t>(batch_count);
  return r;
}

ReadResult read_cublas_grouped_call(const char* source, const GroupedProblems& groups, const void* Aarray,
                                    cudaDataType Atype, const void* Barray, cudaDataType Btype, CUstream stream) {
  ReadResult r;
  const std::optional<DTypeMapping> ta = map_dtype(Atype), tb = map_dtype(Btype);
  if (!ta || !tb) return r;  // kUnsupportedDtype
  r.reason = shm::DropReason::kUnreadableBatch;
  const std::size_t count = groups.m.size();
  if (count == 0 || Aarray == nullptr || Barray == nullptr) return r;
  // One role for the call: every group transposed alike (an MoE layer's experts are).
  const bool transa = groups.transa[0], transb = groups.transb[0];
  OperandView a = stored_matrix(Aarray, *ta, 0, 0, 0, false, 1, 0);
  OperandView b = stored_matrix(Barray, *tb, 0, 0, 0, false, 1, 0);
  for (std::size_t g = 0; g < count; ++g) {
    const std::int64_t m = groups.m[g], n = groups.n[g], k = groups.k[g];
    if (groups.transa[g] != transa || groups.transb[g] != transb || m < 0 || n < 0 || k < 0 || groups.group_size[g] < 0) {
      return r;
    }
    // Column major: A is m x k (k x m transposed), B is k x n (n x k); an empty problem (no tokens)
    // keeps its place, so experts keep their indices.
    const ExpertShape sa{static_cast<std::uint64_t>(transa ? k : m), static_cast<std::uint64_t>(transa ? m : k), groups.lda[g]};
    const ExpertShape sb{static_cast<std::uint64_t>(transb ? n : k), static_cast<std::uint64_t>(transb ? k : n), groups.ldb[g]};
    if (sa.ld < static_cast<std::int64_t>(sa.rows) || sb.ld < static_cast<std::int64_t>(sb.rows)) return r;
    for (std::int64_t i = 0; i < groups.group_size[g]; ++i) {
      if (a.expert_shapes.size() >= 0xFFFFFFFFull) return r;
      a.expert_shapes.push_back(sa);
      b.expert_shapes.push_back(sb);
    }
  }
  if (a.expert_shapes.empty()) return r;
  a.experts = b.experts = static_cast<std::uint32_t>(a.expert_shapes.size());
  GemmCall call = gemm_call(source, transa, transb, a, b, stream);
  call.experts = a.experts;
  r.call = call;
  return r;
}

}  // namespace fp8scope::hook
