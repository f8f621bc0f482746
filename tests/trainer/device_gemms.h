// tiny_trainer's device side: buffers through the driver API and the GEMMs through cuBLASLt and
// cuBLAS, exactly as a framework issues them (column-major cuBLAS, row-major tensors): every
// matrix is row-major [rows, cols] on the host, which cuBLAS sees as column-major [cols, rows].
// Any failure ends the program with a line naming the call.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace fp8scope::trainer {

[[noreturn]] void fail(const char* what, long code);

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  const void* get() const { return reinterpret_cast<const void*>(ptr_); }
  void* get() { return reinterpret_cast<void*>(ptr_); }

 private:
  CUdeviceptr ptr_ = 0;
};

enum class Element { kBF16, kE4M3, kE5M2, kE2M1 };

// One operand as a GEMM reads it: device data (row-major [rows, cols], FP4 two a byte) and, for FP8
// and FP4, the device address of its scales in cuBLASLt's scale mode: one scale_inv, or the scale
// tensor of a block mode.
struct DeviceOperand {
  const void* data;
  Element element;
  int rows, cols;
  const void* scales = nullptr;
  cublasLtMatmulMatrixScale_t scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

// The GEMM forms mixture-of-experts layers use, one problem per expert: cuBLASLt grouped layouts
// (the device holds each group's shape), cublasGemmGroupedBatchedEx (one group per expert),
// cublasGemmBatchedEx (every expert padded to one shape) and a loop of cublasLtMatmul calls, one
// per expert with tokens (Transformer Engine's GroupedLinear).
enum class ExpertForm { kLtGrouped, kCublasGrouped, kCublasBatched, kLoop };

// One expert's problem as cuBLAS sees it (column major, ld = rows): d (m x n, fp32) = op(a) op(b),
// BF16 a and b, or E4M3 codes with their MXFP8 scale tensors (VEC32_UE8M0; cuBLASLt forms only).
struct ExpertProblem {
  const void* a;
  int a_rows, a_cols;
  const void* b;
  int b_rows, b_cols;
  void* d;
  int m, n;
  Element element = Element::kBF16;
  const void* a_scales = nullptr;
  const void* b_scales = nullptr;
};

// One pass of a grouped GEMM as cuBLASLt's grouped layouts read it: device arrays of each group's
// pointers and of its rows and cols (int32, ld = rows). Kept across calls, the same arrays each
// time, so a CUDA graph that captured the GEMM reads what write() put there at every replay.
class GroupedArrays {
 public:
  GroupedArrays(int groups, Element element);
  // The problems' pointers and shapes (one per group) into the arrays.
  void write(const std::vector<ExpertProblem>& problems);
  int groups() const { return groups_; }
  Element element() const { return element_; }
  enum Array { kA, kB, kD, kARows, kACols, kBRows, kBCols, kDRows, kDCols, kAScales, kBScales, kArrays };
  const void* get(Array a) const { return arrays_[a]->get(); }

 private:
  int groups_;
  Element element_;
  std::unique_ptr<DeviceBuffer> arrays_[kArrays];
};

class Gemms {
 public:
  Gemms();
  ~Gemms();

  CUstream stream() const { return stream_; }

  // out[M,N] (fp32, row-major) = x[M,K] w[N,K]^T through cublasLtMatmul, TN.
  void fprop(const DeviceOperand& w, const DeviceOperand& x, DeviceBuffer& out, int M, int N, int K);
  // BF16 backward, in the layouts PyTorch uses: dX[M,K] = dY[M,N] W[N,K] (cublasGemmEx, NN) and
  // dW[N,K] = dY^T X (cublasLtMatmul, NT).
  void dgrad_nn(const DeviceOperand& w, const DeviceOperand& dy, DeviceBuffer& dx, int M, int N, int K);
  void wgrad_nt(const DeviceOperand& x, const DeviceOperand& dy, DeviceBuffer& dw, int M, int N, int K);
  // FP8 and FP4 GEMMs are TN (Ada/Hopper cuBLASLt): out[P,Q] = alpha b[P,L] a[Q,L]^T (cuBLAS's
  // A = a, B = b), used for all three GEMMs with transposed copies. alpha_device: a device pointer
  // to alpha (TE's NVFP4 GEMMs fold the per-tensor scales into it), else alpha is 1.
  void tn(const DeviceOperand& a, const DeviceOperand& b, DeviceBuffer& out, int P, int Q, int L,
          const float* alpha_device = nullptr);
  // MXFP8's backward on Blackwell, as TE runs it with its column-wise copies (not transposed):
  // dgrad NN, dX[M,K] = dY[M,N] W[N,K], and wgrad NT (wgrad_nt), both through cublasLtMatmul with scales.
  void dgrad_nn_lt(const DeviceOperand& w, const DeviceOperand& dy, DeviceBuffer& dx, int M, int N, int K);

  // Every expert's problem of one pass in the given form (kCublasBatched: all of one shape).
  void experts(ExpertForm form, bool transa, bool transb, const std::vector<ExpertProblem>& problems);
  // One pass through cuBLASLt's grouped layouts, from arrays the caller keeps.
  void lt_grouped(bool transa, bool transb, const GroupedArrays& arrays);

  // Starts capturing the stream into a CUDA graph, runs one GEMM, ends and discards the graph.
  void capture_probe(const DeviceOperand& w, const DeviceOperand& x, DeviceBuffer& out, int M, int N, int K);

 private:
  void lt_matmul(bool transa, bool transb, const DeviceOperand& a, int a_rows, int a_cols, const DeviceOperand& b,
                 int b_rows, int b_cols, DeviceBuffer& out, int m, int n, const float* alpha_device = nullptr);
  void lt_grouped(bool transa, bool transb, const std::vector<ExpertProblem>& problems);
  void cublas_grouped(bool transa, bool transb, const std::vector<ExpertProblem>& problems);
  void cublas_batched(bool transa, bool transb, const std::vector<ExpertProblem>& problems);
  void lt_one(bool transa, bool transb, const ExpertProblem& p);

  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<DeviceBuffer> workspace_, zero_;  // zero_: beta when scalars are device pointers
};

}  // namespace fp8scope::trainer
