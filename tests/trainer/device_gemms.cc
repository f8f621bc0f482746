#include "device_gemms.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <tuple>

namespace fp8scope::trainer {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(what, r);
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(what, s);
}

cudaDataType data_type(Element e) {
  switch (e) {
    case Element::kBF16: return CUDA_R_16BF;
    case Element::kE4M3: return CUDA_R_8F_E4M3;
    case Element::kE5M2: return CUDA_R_8F_E5M2;
    case Element::kE2M1: return CUDA_R_4F_E2M1;
  }
  return CUDA_R_16BF;
}

}  // namespace

void fail(const char* what, long code) {
  std::fprintf(stderr, "tiny_trainer: %s failed (status %ld)\n", what, code);
  std::exit(1);
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) { check(cuMemAlloc(&ptr_, bytes), "cuMemAlloc"); }
DeviceBuffer::~DeviceBuffer() { cuMemFree(ptr_); }
void DeviceBuffer::upload(const void* host, std::size_t bytes) { check(cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD"); }
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check(cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

Gemms::Gemms() {
  CUdevice device = 0;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&context_, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  check(cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate");
  check(cublasLtCreate(&lt_), "cublasLtCreate");
  check(cublasCreate(&blas_), "cublasCreate");
  check(cublasSetStream(blas_, stream_), "cublasSetStream");
  workspace_ = std::make_unique<DeviceBuffer>(kWorkspaceBytes);
  zero_ = std::make_unique<DeviceBuffer>(sizeof(float));
  const float zero = 0.0f;
  zero_->upload(&zero, sizeof zero);
}

Gemms::~Gemms() {
  workspace_.reset();
  zero_.reset();
  cublasDestroy(blas_);
  cublasLtDestroy(lt_);
  cuStreamDestroy(stream_);
}

void Gemms::lt_matmul(bool transa, bool transb, const DeviceOperand& a, int a_rows, int a_cols, const DeviceOperand& b,
                      int b_rows, int b_cols, DeviceBuffer& out, int m, int n, const float* alpha_device) {
  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const std::int32_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
  for (const auto& [operand, pointer_attr, mode_attr] :
       {std::tuple{&a, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_MODE},
        std::tuple{&b, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}}) {
    if (operand->scales == nullptr) continue;
    check(cublasLtMatmulDescSetAttribute(desc, pointer_attr, &operand->scales, sizeof operand->scales),
          "set the scale pointer");
    if (operand->scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
      const std::int32_t mode = operand->scale_mode;
      check(cublasLtMatmulDescSetAttribute(desc, mode_attr, &mode, sizeof mode), "set the scale mode");
    }
  }
  if (alpha_device != nullptr) {
    const std::int32_t device = CUBLASLT_POINTER_MODE_DEVICE;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device, sizeof device),
          "set POINTER_MODE");
  }
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  check(cublasLtMatrixLayoutCreate(&la, data_type(a.element), a_rows, a_cols, a_rows), "cublasLtMatrixLayoutCreate A");
  check(cublasLtMatrixLayoutCreate(&lb, data_type(b.element), b_rows, b_cols, b_rows), "cublasLtMatrixLayoutCreate B");
  check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m), "cublasLtMatrixLayoutCreate D");
  // With device pointers, beta too is read from the device: it lives beside the workspace.
  const float alpha = 1.0f, beta = 0.0f;
  const void* alpha_arg = alpha_device != nullptr ? static_cast<const void*>(alpha_device) : &alpha;
  const void* beta_arg = alpha_device != nullptr ? zero_->get() : &beta;
  check(cublasLtMatmul(lt_, desc, alpha_arg, a.data, la, b.data, lb, beta_arg, out.get(), ld, out.get(), ld, nullptr,
                       workspace_->get(), kWorkspaceBytes, stream_),
        "cublasLtMatmul");
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

void Gemms::fprop(const DeviceOperand& w, const DeviceOperand& x, DeviceBuffer& out, int M, int N, int K) {
  // As cuBLAS sees it (column major): out is N x M, A = w stored K x N and transposed, B = x
  // stored K x M.
  lt_matmul(true, false, w, K, N, x, K, M, out, N, M);
}

void Gemms::dgrad_nn(const DeviceOperand& w, const DeviceOperand& dy, DeviceBuffer& dx, int M, int N, int K) {
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &alpha, w.data, data_type(w.element), K, dy.data,
                     data_type(dy.element), N, &beta, dx.get(), CUDA_R_32F, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void Gemms::dgrad_nn_lt(const DeviceOperand& w, const DeviceOperand& dy, DeviceBuffer& dx, int M, int N, int K) {
  // dX (row-major M x K) is column-major K x M = w (K x N) times dy (N x M).
  lt_matmul(false, false, w, K, N, dy, N, M, dx, K, M);
}

void Gemms::wgrad_nt(const DeviceOperand& x, const DeviceOperand& dy, DeviceBuffer& dw, int M, int N, int K) {
  // dW (row-major N x K) is column-major K x N = x (K x M) times dy^T (M x N).
  lt_matmul(false, true, x, K, M, dy, N, M, dw, K, N);
}

void Gemms::tn(const DeviceOperand& a, const DeviceOperand& b, DeviceBuffer& out, int P, int Q, int L,
               const float* alpha_device) {
  lt_matmul(true, false, a, L, Q, b, L, P, out, Q, P, alpha_device);
}

namespace {

// cuBLASLt's grouped API (cuBLAS 13.2+; not in the 13.1 headers the trainer builds against), from
// NVIDIA's cuBLASLt documentation: cublasLtGroupedMatrixLayoutCreate, resolved at run time.
using GroupedLayoutCreate = cublasStatus_t (*)(cublasLtMatrixLayout_t*, cudaDataType, int, const void*, const void*,
                                               const void*);

GroupedLayoutCreate grouped_layout_create() {
  static const auto f = reinterpret_cast<GroupedLayoutCreate>(dlsym(RTLD_DEFAULT, "cublasLtGroupedMatrixLayoutCreate"));
  if (f == nullptr) fail("cublasLtGroupedMatrixLayoutCreate (cuBLAS 13.2 or newer) not found", 0);
  return f;
}

// A device array of the host values (pointers or int32 shapes) for one call.
template <class T>
std::unique_ptr<DeviceBuffer> device_array(const std::vector<T>& v) {
  auto b = std::make_unique<DeviceBuffer>(std::max<std::size_t>(v.size(), 1) * sizeof(T));
  if (!v.empty()) b->upload(v.data(), v.size() * sizeof(T));
  return b;
}

}  // namespace

namespace {

// MXFP8 experts: both operands' scale modes, and their scale pointers (for a grouped GEMM, device
// arrays of one pointer per group, as Transformer Engine sets them: cublaslt_grouped_gemm.cu:867-890).
void set_mxfp8_scales(cublasLtMatmulDesc_t desc, const void* a_scales, const void* b_scales) {
  const std::int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode), "set A_SCALE_MODE");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode), "set B_SCALE_MODE");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scales, sizeof a_scales),
        "set A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scales, sizeof b_scales),
        "set B_SCALE_POINTER");
}

}  // namespace

void Gemms::experts(ExpertForm form, bool transa, bool transb, const std::vector<ExpertProblem>& problems) {
  if (form != ExpertForm::kLtGrouped && form != ExpertForm::kLoop && !problems.empty() &&
      problems.front().element != Element::kBF16) {
    fail("MXFP8 experts through cuBLAS (it has no block-scaled batched GEMM)", 0);
  }
  switch (form) {
    case ExpertForm::kLtGrouped: return lt_grouped(transa, transb, problems);
    case ExpertForm::kCublasGrouped: return cublas_grouped(transa, transb, problems);
    case ExpertForm::kCublasBatched: return cublas_batched(transa, transb, problems);
    case ExpertForm::kLoop:
      for (const ExpertProblem& p : problems) {
        if (p.m > 0 && p.n > 0 && (transa ? p.a_rows : p.a_cols) > 0) lt_one(transa, transb, p);
      }
      return;
  }
}

void Gemms::lt_one(bool transa, bool transb, const ExpertProblem& p) {
  const float alpha = 1.0f, beta = 0.0f;
  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const std::int32_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
  if (p.element != Element::kBF16) set_mxfp8_scales(desc, p.a_scales, p.b_scales);
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  const cudaDataType type = data_type(p.element);
  check(cublasLtMatrixLayoutCreate(&la, type, p.a_rows, p.a_cols, p.a_rows), "cublasLtMatrixLayoutCreate A");
  check(cublasLtMatrixLayoutCreate(&lb, type, p.b_rows, p.b_cols, p.b_rows), "cublasLtMatrixLayoutCreate B");
  check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, p.m, p.n, p.m), "cublasLtMatrixLayoutCreate D");
  check(cublasLtMatmul(lt_, desc, &alpha, p.a, la, p.b, lb, &beta, p.d, ld, p.d, ld, nullptr, workspace_->get(),
                       kWorkspaceBytes, stream_),
        "cublasLtMatmul");
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

GroupedArrays::GroupedArrays(int groups, Element element) : groups_(groups), element_(element) {
  for (int a = 0; a < kArrays; ++a) {
    const std::size_t element_bytes = a <= kD || a >= kAScales ? sizeof(void*) : sizeof(std::int32_t);
    arrays_[a] = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(std::max(groups, 1)) * element_bytes);
  }
}

void GroupedArrays::write(const std::vector<ExpertProblem>& problems) {
  if (static_cast<int>(problems.size()) != groups_) fail("a grouped GEMM's problems: not one per group", 0);
  std::vector<const void*> pointers[5];  // a, b, d, a_scales, b_scales
  std::vector<std::int32_t> dims[6];     // a_rows, a_cols, b_rows, b_cols, d_rows, d_cols
  for (const ExpertProblem& p : problems) {
    pointers[0].push_back(p.a), pointers[1].push_back(p.b), pointers[2].push_back(p.d);
    pointers[3].push_back(p.a_scales), pointers[4].push_back(p.b_scales);
    dims[0].push_back(p.a_rows), dims[1].push_back(p.a_cols), dims[2].push_back(p.b_rows), dims[3].push_back(p.b_cols);
    dims[4].push_back(p.m), dims[5].push_back(p.n);
  }
  if (groups_ == 0) return;
  const Array pointer_arrays[] = {kA, kB, kD, kAScales, kBScales};
  for (int i = 0; i < 5; ++i) arrays_[pointer_arrays[i]]->upload(pointers[i].data(), pointers[i].size() * sizeof(void*));
  for (int i = 0; i < 6; ++i) arrays_[kARows + i]->upload(dims[i].data(), dims[i].size() * sizeof(std::int32_t));
}

void Gemms::lt_grouped(bool transa, bool transb, const std::vector<ExpertProblem>& problems) {
  GroupedArrays arrays(static_cast<int>(problems.size()), problems.front().element);
  arrays.write(problems);
  lt_grouped(transa, transb, arrays);
}

void Gemms::lt_grouped(bool transa, bool transb, const GroupedArrays& arrays) {
  // As Transformer Engine sets it up (cublaslt_grouped_gemm.cu): device arrays of pointers and of
  // int32 rows and cols per group, ld = rows, every layout grouped.
  using A = GroupedArrays;
  const int groups = arrays.groups();
  const cudaDataType type = data_type(arrays.element());
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  check(grouped_layout_create()(&la, type, groups, arrays.get(A::kARows), arrays.get(A::kACols), arrays.get(A::kARows)),
        "grouped layout A");
  check(grouped_layout_create()(&lb, type, groups, arrays.get(A::kBRows), arrays.get(A::kBCols), arrays.get(A::kBRows)),
        "grouped layout B");
  check(grouped_layout_create()(&ld, CUDA_R_32F, groups, arrays.get(A::kDRows), arrays.get(A::kDCols),
                                arrays.get(A::kDRows)),
        "grouped layout D");
  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const std::int32_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
  if (arrays.element() != Element::kBF16) set_mxfp8_scales(desc, arrays.get(A::kAScales), arrays.get(A::kBScales));
  const float alpha = 1.0f, beta = 0.0f;
  void* d = const_cast<void*>(arrays.get(A::kD));
  check(cublasLtMatmul(lt_, desc, &alpha, arrays.get(A::kA), la, arrays.get(A::kB), lb, &beta, d, ld, d, ld, nullptr,
                       workspace_->get(), kWorkspaceBytes, stream_),
        "cublasLtMatmul (grouped)");
  cublasLtMatmulDescDestroy(desc);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
}

void Gemms::cublas_grouped(bool transa, bool transb, const std::vector<ExpertProblem>& problems) {
  const std::size_t n = problems.size();
  std::vector<cublasOperation_t> ta(n, transa ? CUBLAS_OP_T : CUBLAS_OP_N), tb(n, transb ? CUBLAS_OP_T : CUBLAS_OP_N);
  std::vector<int> m, nn, k, lda, ldb, ldc, size(n, 1);
  std::vector<float> alpha(n, 1.0f), beta(n, 0.0f);
  std::vector<const void*> a, b;
  std::vector<void*> d;
  for (const ExpertProblem& p : problems) {
    m.push_back(p.m), nn.push_back(p.n), k.push_back(transa ? p.a_rows : p.a_cols);
    lda.push_back(p.a_rows), ldb.push_back(p.b_rows), ldc.push_back(p.m);
    a.push_back(p.a), b.push_back(p.b), d.push_back(p.d);
  }
  auto da = device_array(a), db = device_array(b), dd = device_array(d);
  check(cublasGemmGroupedBatchedEx(blas_, ta.data(), tb.data(), m.data(), nn.data(), k.data(), alpha.data(),
                                   static_cast<const void* const*>(da->get()), CUDA_R_16BF, lda.data(),
                                   static_cast<const void* const*>(db->get()), CUDA_R_16BF, ldb.data(), beta.data(),
                                   static_cast<void* const*>(dd->get()), CUDA_R_32F, ldc.data(), static_cast<int>(n),
                                   size.data(), CUBLAS_COMPUTE_32F),
        "cublasGemmGroupedBatchedEx");
}

void Gemms::cublas_batched(bool transa, bool transb, const std::vector<ExpertProblem>& problems) {
  const ExpertProblem& p0 = problems.front();
  std::vector<const void*> a, b;
  std::vector<void*> d;
  for (const ExpertProblem& p : problems) a.push_back(p.a), b.push_back(p.b), d.push_back(p.d);
  auto da = device_array(a), db = device_array(b), dd = device_array(d);
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasGemmBatchedEx(blas_, transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb ? CUBLAS_OP_T : CUBLAS_OP_N, p0.m, p0.n,
                            transa ? p0.a_rows : p0.a_cols, &alpha, static_cast<const void* const*>(da->get()),
                            CUDA_R_16BF, p0.a_rows, static_cast<const void* const*>(db->get()), CUDA_R_16BF, p0.b_rows,
                            &beta, static_cast<void* const*>(dd->get()), CUDA_R_32F, p0.m,
                            static_cast<int>(problems.size()), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmBatchedEx");
}

void Gemms::capture_probe(const DeviceOperand& w, const DeviceOperand& x, DeviceBuffer& out, int M, int N, int K) {
  check(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  fprop(w, x, out, M, N, K);
  CUgraph graph = nullptr;
  check(cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
  if (graph != nullptr) cuGraphDestroy(graph);
}

}  // namespace fp8scope::trainer
