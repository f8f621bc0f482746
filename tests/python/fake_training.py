"""A Python training loop in the shape of a PyTorch one, for fp8scope_helper_test.py: modules with
PyTorch's hook methods, GEMMs through cuBLASLt by ctypes (the CPU fixtures of libcuda and
libcublasLt stand in for the GPU), and the helper's name_modules, step and log.

    fake_training.py FIXTURES_DIR STEPS
"""
import ctypes
import sys

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


def matmul(transa, transb, a, a_rows, a_cols, b, b_rows, b_cols, m, n):
    """Column-major D (m x n) = op(A) op(B) in fp32, as cuBLAS sees row-major tensors."""
    desc = P()
    assert lt.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0
    for attr, flag in ((TRANSA, transa), (TRANSB, transb)):
        value = I32(1 if flag else 0)
        lt.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value), 4)
    la, lb, ld = P(), P(), P()
    lt.cublasLtMatrixLayoutCreate(ctypes.byref(la), CUDA_R_32F, a_rows, a_cols, a_rows)
    lt.cublasLtMatrixLayoutCreate(ctypes.byref(lb), CUDA_R_32F, b_rows, b_cols, b_rows)
    lt.cublasLtMatrixLayoutCreate(ctypes.byref(ld), CUDA_R_32F, m, n, m)
    out = (ctypes.c_float * (m * n))()
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    status = process.cublasLtMatmul(handle, desc, ctypes.byref(one), a, la, b, lb, ctypes.byref(zero), out, ld, out,
                                    ld, None, None, 0, None)
    assert status == 0, status
    return out


class Hooks:
    """The hook-registration surface of torch.nn.Module that name_modules uses."""

    def __init__(self):
        self.pre, self.post, self.bwd_pre, self.bwd_post = [], [], [], []

    def _add(self, table, fn):
        table.append(fn)

        class Handle:
            def remove(self):
                table.remove(fn)

        return Handle()

    def register_forward_pre_hook(self, fn):
        return self._add(self.pre, fn)

    def register_forward_hook(self, fn):
        return self._add(self.post, fn)

    def register_full_backward_pre_hook(self, fn):
        return self._add(self.bwd_pre, fn)

    def register_full_backward_hook(self, fn):
        return self._add(self.bwd_post, fn)


class Linear(Hooks):
    def __init__(self, n_in, n_out, seed):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.weight = (ctypes.c_float * (n_in * n_out))(*[((i * 7 + seed) % 13 - 6) / 10 for i in range(n_in * n_out)])

    def forward(self, x, rows):
        for h in self.pre:
            h(self, (x,))
        y = matmul(True, False, self.weight, self.n_in, self.n_out, x, self.n_in, rows, self.n_out, rows)  # TN: fprop
        for h in self.post:
            h(self, (x,), y)
        return y

    def backward(self, dy, rows):
        for h in self.bwd_pre:
            h(self, (dy,))
        dx = matmul(False, False, self.weight, self.n_in, self.n_out, dy, self.n_out, rows, self.n_in, rows)  # NN: dgrad
        for h in self.bwd_post:
            h(self, (dx,), (dy,))
        return dx


class Model(Hooks):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = Linear(16, 32, 1), Linear(32, 8, 2)

    def named_modules(self):
        return [("", self), ("fc1", self.fc1), ("fc2", self.fc2)]


model = Model()
handles = fp8scope.name_modules(model, use_nvtx=False)
assert len(handles) == 12, len(handles)
rows = 4
for step in range(STEPS):
    fp8scope.step(step)
    x = (ctypes.c_float * (16 * rows))(*[(i % 5) / 4 for i in range(16 * rows)])
    for h in model.pre:
        h(model, (x,))
    y = model.fc2.forward(model.fc1.forward(x, rows), rows)
    for h in model.post:
        h(model, (x,), y)
    loss = sum(v * v for v in y) / len(y)
    dy = (ctypes.c_float * len(y))(*[2 * v / len(y) for v in y])
    model.fc1.backward(model.fc2.backward(dy, rows), rows)
    fp8scope.log("loss", loss)
print(f"fake_training: {STEPS} steps, hook {'loaded' if fp8scope.available() else 'absent'}")
