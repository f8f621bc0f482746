"""The hook on a GPU with PyTorch (scripts/gpu-check.sh runs this; it needs a CUDA GPU).

    gpu_torch_check.py train EXPECTED.json                # under `fp8scope run --every 1 --job torch`
    gpu_torch_check.py graph EXPECTED.json                # under `fp8scope run --every 1 --job torch-graph`
    gpu_torch_check.py compare EXPECTED.json METRICS [JOB]  # METRICS: the daemon's host:port

`train` trains a small BF16 MLP named by fp8scope.name_modules for a few steps, then runs one FP8
GEMM with torch._scaled_mm (E4M3, per-tensor scales), and writes what PyTorch's own casts say
about the tensors the hook sampled at the last step: for the BF16 operands, the MSE and cosine of
current scaling to E4M3 (x_hat = fp32(Q(x * s)) * fp32(1 / s), s = 448 / amax); for the FP8
operands, their dequantized amax. `graph` captures a BF16 GEMM and an FP8 torch._scaled_mm into
one CUDA graph (torch.cuda.CUDAGraph) and replays it for a few steps, new inputs copied into the
graph's tensors before each replay, and writes the same figures of the last replay's operands.
`compare` checks the daemon's metrics against those numbers.
"""
import json
import sys
import urllib.request

STEPS = 4
E4M3_MAX = 448.0


def current_scaling(t):
    import torch

    x = t.detach().float()
    amax = x.abs().max()
    scale = (E4M3_MAX / amax).float()
    q = (x * scale).to(torch.float8_e4m3fn).float() * (1.0 / scale)
    xd, qd = x.double(), q.double()
    mse = ((xd - qd) ** 2).mean().item()
    cosine = ((xd * qd).sum() / (xd.norm() * qd.norm())).item()
    return {"mse": mse, "cosine": cosine, "amax": amax.item()}


def train(out_path):
    import torch

    import fp8scope

    assert fp8scope.available(), "run under `fp8scope run`"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024, bias=False), torch.nn.GELU(),
                                torch.nn.Linear(1024, 512, bias=False)).cuda().to(torch.bfloat16)
    fp8scope.name_modules(model, root="torchmodel")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    expected, state = {}, {"step": 0}

    def keep(name):
        def hook(module, inputs):
            if state["step"] == STEPS - 1:  # the weight as this step's forward GEMM reads it
                expected[f"torchmodel.{name}#0"] = {"x": current_scaling(inputs[0]), "w": current_scaling(module.weight)}
        return hook

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(keep(name))
    for step in range(STEPS):
        state["step"] = step
        fp8scope.step(step)
        x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
        loss = model(x).float().pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        fp8scope.log("loss", loss.item())

    # One FP8 GEMM as Transformer Engine issues it: E4M3 operands with their scale_inv.
    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16) * 0.02
    sa, sb = (E4M3_MAX / a.float().abs().max()), (E4M3_MAX / b.float().abs().max())
    a8, b8 = (a.float() * sa).to(torch.float8_e4m3fn), (b.float() * sb).to(torch.float8_e4m3fn)
    inv_a, inv_b = (1.0 / sa).reshape(()), (1.0 / sb).reshape(())
    fp8scope.step(STEPS)
    fp8scope.range_push("scaled_mm/fprop")
    torch._scaled_mm(a8, b8.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16)
    fp8scope.range_pop()
    torch.cuda.synchronize()
    expected["scaled_mm#0"] = {"x": {"amax": (a8.float() * inv_a).abs().max().item()},
                               "w": {"amax": (b8.float() * inv_b).abs().max().item()}}
    with open(out_path, "w") as f:
        json.dump(expected, f, indent=1)
    print(f"gpu_torch_check: {STEPS} BF16 steps and one torch._scaled_mm ran under the hook")


def graph(out_path):
    import torch

    import fp8scope

    assert fp8scope.available(), "run under `fp8scope run`"
    torch.manual_seed(0)
    a = torch.empty(256, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(384, 512, device="cuda", dtype=torch.bfloat16)
    a8 = torch.empty(256, 512, device="cuda", dtype=torch.float8_e4m3fn)
    b8 = torch.empty(384, 512, device="cuda", dtype=torch.float8_e4m3fn)
    inv_a = torch.ones((), device="cuda")
    inv_b = torch.ones((), device="cuda")

    def step_body():
        fp8scope.range_push("graph_bf16/fprop")
        torch.mm(a, b.t())
        fp8scope.range_pop()
        fp8scope.range_push("graph_fp8/fprop")
        torch._scaled_mm(a8, b8.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16)
        fp8scope.range_pop()

    def fill():
        x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16) * 0.02
        sa, sb = E4M3_MAX / x.float().abs().max(), E4M3_MAX / w.float().abs().max()
        a.copy_(x), b.copy_(w)
        a8.copy_((x.float() * sa).to(torch.float8_e4m3fn)), b8.copy_((w.float() * sb).to(torch.float8_e4m3fn))
        inv_a.copy_(1.0 / sa), inv_b.copy_(1.0 / sb)

    fill()
    side = torch.cuda.Stream()  # PyTorch's warm-up before capture, on a side stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step_body()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step_body()
    for step in range(STEPS):
        fill()
        fp8scope.step(100 + step)
        g.replay()
    torch.cuda.synchronize()
    expected = {"graph_bf16#0": {"x": current_scaling(a), "w": current_scaling(b)},
                "graph_fp8#0": {"x": {"amax": (a8.float() * inv_a).abs().max().item()},
                                "w": {"amax": (b8.float() * inv_b).abs().max().item()}}}
    with open(out_path, "w") as f:
        json.dump(expected, f, indent=1)
    print(f"gpu_torch_check: a BF16 and an FP8 GEMM captured in a CUDA graph, replayed {STEPS} times under the hook")


def metric(text, name, labels):
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        body, value = line[len(name) + 1:].rsplit("} ", 1)
        pairs = dict(p.split("=", 1) for p in body.split(","))
        if all(pairs.get(k) == f'"{v}"' for k, v in labels.items()):
            return float(value)
    return None


def compare(expected_path, metrics_address, job="torch"):
    with open(expected_path) as f:
        expected = json.load(f)
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    failures, checked = [], 0
    for layer, operands in expected.items():
        for operand, stats in operands.items():
            tensor = {"job": job, "layer": layer, "gemm": "fprop", "operand": operand}
            recipe = dict(tensor, format="e4m3", recipe="tensor_current")
            for key, want in stats.items():
                got = metric(text, "fp8scope_amax", tensor) if key == "amax" else \
                    metric(text, "fp8scope_mse" if key == "mse" else "fp8scope_cosine_similarity", recipe)
                checked += 1
                if got is None or abs(got - want) > 1e-6 * max(abs(want), 1e-30):
                    failures.append(f"{layer} {operand} {key}: daemon {got}, PyTorch {want}")
    for f in failures:
        print("MISMATCH", f)
    print(f"gpu_torch_check: {checked - len(failures)}/{checked} daemon figures match PyTorch's casts")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "train":
        train(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "graph":
        graph(sys.argv[2])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "compare":
        sys.exit(compare(*sys.argv[2:]))
    else:
        sys.exit(__doc__)
