"""fp8scope's helper for Python training scripts run under `fp8scope run` (standard library only).

    import fp8scope

    fp8scope.name_modules(model)           # GEMMs are named by module path: "model.layers.3.mlp.fc1#0"
    for step, batch in enumerate(loader):
        fp8scope.step(step)                # samples carry the step; the policy's every-N counts it
        loss = train_step(batch)
        fp8scope.log("loss", float(loss))  # stored with the run, for comparing runs

It talks to libfp8scope_hook.so through ctypes; the hook is in the process when `fp8scope run`
started it (LD_PRELOAD). Without the hook every function here does nothing, so scripts keep working
unchanged outside `fp8scope run`.
"""
import ctypes
import warnings

__all__ = ["available", "step", "log", "range_push", "range_pop", "name_modules"]

_MAX_NAME_BYTES = 63


def _load_hook():
    try:
        process = ctypes.CDLL(None)  # the global namespace, where LD_PRELOAD put the hook
        version = process.fp8scope_hook_api_version
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_uint32
    process.fp8scope_step.argtypes = [ctypes.c_uint64]
    process.fp8scope_log_scalar.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_double]
    process.fp8scope_range_push.argtypes = [ctypes.c_char_p]
    process.fp8scope_range_pop.argtypes = []
    return process


_hook = _load_hook()
_current_step = 0


def available():
    """True when the hook is loaded, i.e. the script runs under `fp8scope run`."""
    return _hook is not None


def step(n):
    """The training loop entered step n (a non-negative integer)."""
    global _current_step
    n = int(n)
    if n < 0:
        raise ValueError(f"fp8scope.step: expected a non-negative step, got {n}")
    _current_step = n
    if _hook is not None:
        _hook.fp8scope_step(n)


def log(name, value, step=None):
    """A scalar of the run ("loss", "grad_norm", "lr") at `step` (default: the last step())."""
    name = str(name)
    encoded = name.encode("ascii", "replace")
    if not name.isascii() or not encoded or len(encoded) > _MAX_NAME_BYTES or any(c <= 32 or c > 126 for c in encoded):
        raise ValueError(f"fp8scope.log: name must be 1..{_MAX_NAME_BYTES} printable ASCII characters, got {name!r}")
    if _hook is not None:
        _hook.fp8scope_log_scalar(encoded, _current_step if step is None else int(step), float(value))


def range_push(name):
    """Names the GEMMs that follow (until range_pop) when NVTX is not at hand."""
    if _hook is not None:
        _hook.fp8scope_range_push(str(name).encode("ascii", "replace"))


def range_pop():
    if _hook is not None:
        _hook.fp8scope_range_pop()


def _nvtx_ranges():
    """torch.cuda.nvtx when it can reach the hook (CUDA builds of PyTorch), else None."""
    try:
        import torch  # noqa: PLC0415 - only scripts that have PyTorch get here
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


def name_modules(model, root="model", use_nvtx=None):
    """Pushes a range named by each module's path around its forward ("<path>/forward") and its
    backward ("<path>/backward"), so the hook names every GEMM by the innermost module that ran it.

    use_nvtx: True pushes NVTX ranges through torch.cuda.nvtx (visible to Nsight too), False uses
    the hook's own range API; None (the default) takes NVTX when PyTorch has CUDA. Returns the hook
    handles (call .remove() on each to undo). Modules without full backward hooks (PyTorch < 2.0)
    are named in forward only.
    """
    nvtx = _nvtx_ranges() if use_nvtx in (None, True) else None
    if use_nvtx and nvtx is None:
        raise RuntimeError("fp8scope.name_modules: use_nvtx=True needs PyTorch with CUDA")
    push, pop = nvtx if nvtx is not None else (range_push, range_pop)
    if nvtx is None and _hook is None:
        warnings.warn("fp8scope.name_modules: the hook is not loaded (run under `fp8scope run`); nothing is named")
        return []

    handles = []
    for name, module in model.named_modules():
        path = f"{root}.{name}" if name else root

        def forward_pre(_module, _inputs, label=f"{path}/forward"):
            push(label)

        def forward_post(_module, _inputs, _output):
            pop()

        def backward_pre(_module, _grad_output, label=f"{path}/backward"):
            push(label)

        def backward_post(_module, _grad_input, _grad_output):
            pop()

        handles.append(module.register_forward_pre_hook(forward_pre))
        handles.append(module.register_forward_hook(forward_post))
        if hasattr(module, "register_full_backward_pre_hook"):
            handles.append(module.register_full_backward_pre_hook(backward_pre))
            handles.append(module.register_full_backward_hook(backward_post))
    return handles
