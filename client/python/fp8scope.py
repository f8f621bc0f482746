"""fp8scope's helper for Python training scripts run under `fp8scope run` (standard library only).

    import fp8scope

    fp8scope.name_modules(model)           # GEMMs are named by module path: "model.layers.3.mlp.fc1#0",
                                           # or as TE's debug API names them: "...layernorm_mlp.fc1#0"
    for step, batch in enumerate(loader):
        fp8scope.step(step)                # samples carry the step; the policy's every-N counts it
        loss = train_step(batch)
        fp8scope.log("loss", float(loss))  # stored with the run, for comparing runs

It talks to libfp8scope_hook.so through ctypes; the hook is in the process when `fp8scope run`
started it (LD_PRELOAD). Without the hook every function here does nothing, so scripts keep working
unchanged outside `fp8scope run`.
"""
import ctypes
import threading
import warnings

__all__ = ["available", "step", "log", "range_push", "range_pop", "range_gemms", "expert", "expert_tokens",
           "name_modules"]

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
    if version() >= 2:  # mixture-of-experts calls
        process.fp8scope_set_expert.argtypes = [ctypes.c_int32]
        process.fp8scope_expert_tokens.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32]
    if version() >= 3:  # modules that run several GEMMs
        process.fp8scope_range_gemms.argtypes = [ctypes.c_char_p]
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


def range_gemms(sequence):
    """The GEMMs the innermost range runs, in order: "fc1/fprop fc2/fprop" names them "<range>.fc1"
    and "<range>.fc2" (an empty name, "/dgrad", keeps the range's own). See fp8scope/hook.h."""
    if _hook is not None and hasattr(_hook, "fp8scope_range_gemms"):
        _hook.fp8scope_range_gemms(str(sequence).encode("ascii", "replace"))


# Transformer Engine's modules that run more than one GEMM or whose backward GEMMs a TN layout
# cannot tell apart, with their GEMMs in the order TE runs them, forward and backward (TE d0067d0:
# pytorch/module/linear.py, layernorm_linear.py; layernorm_mlp.py:587, 694, 1245, 1400, 1550, 1678,
# which names them "<module>.fc1" and "<module>.fc2", :2653-2666).
_TE_GEMMS = {
    "Linear": ("/fprop", "/dgrad /wgrad"),
    "LayerNormLinear": ("/fprop", "/dgrad /wgrad"),
    "LayerNormMLP": ("fc1/fprop fc2/fprop", "fc2/dgrad fc2/wgrad fc1/dgrad fc1/wgrad"),
}


def _te_gemms(module):
    """(forward, backward) GEMM sequences of a Transformer Engine module, else None."""
    cls = type(module)
    if not cls.__module__.startswith("transformer_engine."):
        return None
    return _TE_GEMMS.get(cls.__name__)


def _paths(torch, model, root):
    """(path, module) as nvdlfw_inspect's infer_and_assign_layer_names names TE's layers
    (nvidia-dlfw-inspect dc19d10, api.py:112-147): from `root`, a ModuleList's children by their
    layer_number when they have one; a TE module keeps the name TE already gave it."""
    out = []

    def walk(module, path):
        te_name = getattr(module, "name", None)
        if _te_gemms(module) is not None and isinstance(te_name, str) and te_name:
            path = te_name
        out.append((path, module))
        in_list = isinstance(module, torch.nn.ModuleList)
        for name, child in module.named_children():
            walk(child, f"{path}.{getattr(child, 'layer_number', name) if in_list else name}")

    walk(model, root)
    return out


class expert:
    """The GEMMs inside run for expert `index` of the layer (a context manager):

        with fp8scope.expert(3):
            y = experts[3](x)
    """

    def __init__(self, index):
        self.index = int(index)
        if self.index < 0:
            raise ValueError(f"fp8scope.expert: expected a non-negative expert index, got {self.index}")

    def __enter__(self):
        if _hook is not None and hasattr(_hook, "fp8scope_set_expert"):
            _hook.fp8scope_set_expert(self.index)
        return self

    def __exit__(self, *exc):
        if _hook is not None and hasattr(_hook, "fp8scope_set_expert"):
            _hook.fp8scope_set_expert(-1)
        return False


def expert_tokens(tokens):
    """Tokens routed to each expert (a sequence of non-negative ints, zero included) for the GEMMs of
    the current range: one GEMM per expert with tokens (TE's GroupedLinear: pass its m_splits) or a
    grouped GEMM whose groups are padded past their tokens."""
    counts = [int(t) for t in tokens]
    if any(t < 0 for t in counts):
        raise ValueError("fp8scope.expert_tokens: token counts must be non-negative")
    if _hook is not None and hasattr(_hook, "fp8scope_expert_tokens") and counts:
        array = (ctypes.c_uint64 * len(counts))(*counts)
        _hook.fp8scope_expert_tokens(array, len(counts))


def _nvtx_ranges():
    """torch.cuda.nvtx when it can reach the hook (CUDA builds of PyTorch), else None."""
    try:
        import torch  # noqa: PLC0415 - only scripts that have PyTorch get here
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


class _BackwardRanges:
    """The "<path>/backward" ranges of one name_modules call.

    A module's backward begins when the gradient of its output is complete and ends when the
    gradient of its input is: a hook on each tensor marks the two, so no tensor is replaced (an
    in-place op on a module's input or output keeps working, as it does not under PyTorch's full
    backward hooks, which also end a module whose input needs no gradient before its weight
    gradient GEMM runs; PyTorch < 2.0 has no backward pre-hook at all). A module whose input needs
    no gradient (the first layer) has nothing after its backward: its range ends with an enclosing
    module's or with the backward pass. An input shared with other modules (q, k and v reading one
    normalized tensor) ends late, but the next module's range opens on top of it, so each module's
    GEMMs still get its name. Ranges nest as the modules do, per thread (autograd runs backward on
    its own threads, and the hook names a GEMM by its thread's innermost range).
    """

    def __init__(self, torch, push, pop, declare):
        self.torch, self.push, self.pop, self.declare = torch, push, pop, declare
        self.local = threading.local()

    def _state(self):
        state = self.local
        if not hasattr(state, "open"):
            state.open, state.closing_queued, state.calls = [], False, {}
        return state

    def _begin(self, call):
        state = self._state()
        self.push(call.label)
        if call.gemms is not None:
            self.declare(call.gemms)
        state.open.append(call)
        if not state.closing_queued:
            state.closing_queued = True
            self.torch.autograd.Variable._execution_engine.queue_callback(lambda: self._close_all(state))

    def _end(self, call):
        state = self._state()
        if call not in state.open:
            return
        while state.open:
            self.pop()
            if state.open.pop() is call:
                return

    def _close_all(self, state):
        while state.open:
            state.open.pop()
            self.pop()
        state.closing_queued = False

    def _marks(self, tensor):
        """The calls that end and begin when `tensor`'s gradient is complete; one hook per tensor."""
        marks = getattr(tensor, "_fp8scope_marks", None)
        if marks is None:
            marks = _Marks()
            tensor._fp8scope_marks = marks
            tensor.register_hook(lambda _grad: self._fire(marks))
        return marks

    def _fire(self, marks):
        # Inner modules end first; then outer modules begin first (hooks were added inner first).
        ends, begins = marks.ends[::-1], marks.begins[::-1]
        marks.ends, marks.begins = [], []
        for call in ends:
            self._end(call)
        for call in begins:
            self._begin(call)

    def _tensors(self, values):
        if isinstance(values, self.torch.Tensor):
            values = (values,)
        elif not isinstance(values, (tuple, list)):
            return []  # dicts and model-output classes: no backward range of their own
        return [v for v in values if isinstance(v, self.torch.Tensor) and v.requires_grad]

    def forward_pre(self, module, inputs, label, gemms):
        call = _Call(label, self._tensors(inputs) if self.torch.is_grad_enabled() else [], gemms)
        self._state().calls.setdefault(id(module), []).append(call)
        for t in call.inputs:
            self._marks(t).ends.append(call)

    def forward_post(self, module, output):
        call = self._state().calls[id(module)].pop()
        if not self.torch.is_grad_enabled():
            return
        for t in self._tensors(output):
            if not any(t is i for i in call.inputs):  # a module that hands its input on has no backward
                self._marks(t).begins.append(call)
        call.inputs = []


class _Marks:
    __slots__ = ("ends", "begins")

    def __init__(self):
        self.ends, self.begins = [], []


class _Call:
    """One call of a module, from its forward to the end of its backward."""

    __slots__ = ("label", "inputs", "gemms")

    def __init__(self, label, inputs, gemms):
        self.label, self.inputs, self.gemms = label, inputs, gemms


def name_modules(model, root="model", use_nvtx=None):
    """Pushes a range named by each module's path around its forward ("<path>/forward") and its
    backward ("<path>/backward"), so the hook names every GEMM by the innermost module that ran it.
    Paths are those Transformer Engine's debug API gives (nvdlfw_inspect's layer names), and a TE
    module's GEMMs are named and given their roles as TE names them: LayerNormMLP's "<path>.fc1"
    and "<path>.fc2", so a TE debug config selects the GEMMs it would select in TE.

    use_nvtx: True pushes NVTX ranges through torch.cuda.nvtx (visible to Nsight too), False uses
    the hook's own range API; None (the default) takes NVTX when PyTorch has CUDA. Returns the hook
    handles (call .remove() on each to undo). The backward range of a module whose output is not a
    tensor, list or tuple (a dict, a model-output class) is left out; its children still have theirs.
    """
    nvtx = _nvtx_ranges() if use_nvtx in (None, True) else None
    if use_nvtx and nvtx is None:
        raise RuntimeError("fp8scope.name_modules: use_nvtx=True needs PyTorch with CUDA")
    push, pop = nvtx if nvtx is not None else (range_push, range_pop)
    if nvtx is None and _hook is None:
        warnings.warn("fp8scope.name_modules: the hook is not loaded (run under `fp8scope run`); nothing is named")
        return []
    import torch  # noqa: PLC0415 - a model to name means PyTorch is there

    ranges = _BackwardRanges(torch, push, pop, range_gemms)
    handles = []
    for path, module in _paths(torch, model, root):
        forward_gemms, backward_gemms = _te_gemms(module) or (None, None)

        def forward_pre(module, inputs, forward=f"{path}/forward", backward=f"{path}/backward",
                        forward_gemms=forward_gemms, backward_gemms=backward_gemms):
            push(forward)
            if forward_gemms is not None:
                range_gemms(forward_gemms)
            ranges.forward_pre(module, inputs, backward, backward_gemms)

        def forward_post(module, _inputs, output):
            pop()
            ranges.forward_post(module, output)

        handles.append(module.register_forward_pre_hook(forward_pre))
        handles.append(module.register_forward_hook(forward_post))
    return handles
