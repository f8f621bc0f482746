"""A PyTorch training loop for fp8scope_helper_test.py: real torch.nn modules whose linear layers
run their GEMMs (fprop, dgrad, wgrad) through cuBLASLt by ctypes, where the CPU fixtures of libcuda
and libcublasLt stand in for the GPU and the hook sees each call; named by the helper's
name_modules, with step and log.

    torch_training.py FIXTURES_DIR STEPS
"""
import ctypes
import sys

import torch

import fp8scope

FIXTURES, STEPS = sys.argv[1], int(sys.argv[2])
cuda = ctypes.CDLL(f"{FIXTURES}/libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
lt = ctypes.CDLL(f"{FIXTURES}/libcublasLt.so.13", mode=ctypes.RTLD_GLOBAL)
process = ctypes.CDLL(None)  # cublasLtMatmul resolved here is the hook's, as a framework's call would be

P, U64, I64, I32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32
lt.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(P), ctypes.c_int, U64, U64, I64]
lt.cublasLtMatmulDescCreate.argtypes = [ctypes.POINTER(P), ctypes.c_int, ctypes.c_int]
lt.cublasLtMatmulDescSetAttribute.argtypes = [P, ctypes.c_int, P, ctypes.c_size_t]
process.cublasLtMatmul.argtypes = [P, P, P, P, P, P, P, P, P, P, P, P, P, P, ctypes.c_size_t, P]
CUDA_R_32F, CUBLAS_COMPUTE_32F, TRANSA, TRANSB = 0, 68, 3, 4

context, device = P(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0 and cuda.cuCtxSetCurrent(context) == 0
handle = P()
assert lt.cublasLtCreate(ctypes.byref(handle)) == 0


def gemm(transa, a, a_rows, a_cols, transb, b, b_rows, b_cols, m, n):
    """Column-major D (m x n) = op(A) op(B) in fp32 through the hooked cublasLtMatmul; A and B are
    contiguous row-major tensors, which cuBLAS reads as their transposes."""
    desc = P()
    assert lt.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0
    for attr, flag in ((TRANSA, transa), (TRANSB, transb)):
        value = I32(1 if flag else 0)
        lt.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value), 4)
    la, lb, ld = P(), P(), P()
    lt.cublasLtMatrixLayoutCreate(ctypes.byref(la), CUDA_R_32F, a_rows, a_cols, a_rows)
    lt.cublasLtMatrixLayoutCreate(ctypes.byref(lb), CUDA_R_32F, b_rows, b_cols, b_rows)
    lt.cublasLtMatrixLayoutCreate(ctypes.byref(ld), CUDA_R_32F, m, n, m)
    out = torch.empty(n, m)  # row-major n x m is column-major m x n
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    status = process.cublasLtMatmul(handle, desc, ctypes.byref(one), P(a.data_ptr()), la, P(b.data_ptr()), lb,
                                    ctypes.byref(zero), P(out.data_ptr()), ld, P(out.data_ptr()), ld, None, None, 0,
                                    None)
    assert status == 0, status
    for layout in (la, lb, ld):
        lt.cublasLtMatrixLayoutDestroy(layout)
    lt.cublasLtMatmulDescDestroy(desc)
    return out


class CublasLinearFunction(torch.autograd.Function):
    """y = x w^T with PyTorch's layouts: fprop TN (A = W, B = X), dgrad NN (A = W, B = Dy), wgrad
    NT (A = X, B = Dy)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        (rows, k), n = x.shape, w.shape[0]
        return gemm(True, w, k, n, False, x, k, rows, n, rows)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        (rows, k), n = x.shape, w.shape[0]
        dy = dy.contiguous()
        dx = gemm(False, w, k, n, False, dy, n, rows, k, rows) if ctx.needs_input_grad[0] else None
        dw = gemm(False, x, k, rows, True, dy, n, rows, k, n)
        return dx, dw


class CublasLinear(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5)

    def forward(self, x):
        return CublasLinearFunction.apply(x, self.weight)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = CublasLinear(16, 32), torch.nn.ReLU(inplace=True), CublasLinear(32, 8)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


torch.manual_seed(0)
model = Mlp()
handles = fp8scope.name_modules(model, use_nvtx=False)
assert len(handles) == 2 * len(list(model.modules())), len(handles)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, target = torch.rand(4, 16), torch.rand(4, 8)
for step in range(STEPS):
    fp8scope.step(step)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    optimizer.step()
    fp8scope.log("loss", float(loss))
print(f"torch_training: {STEPS} steps, hook {'loaded' if fp8scope.available() else 'absent'}")
