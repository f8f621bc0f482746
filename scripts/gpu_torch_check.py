"""The hook on a GPU with PyTorch (scripts/gpu-check.sh runs this; it needs a CUDA GPU).

    gpu_torch_check.py train EXPECTED.json           # under `fp8scope run --every 1`
    gpu_torch_check.py compare EXPECTED.json METRICS  # METRICS: the daemon's host:port

`train` trains a small BF16 MLP named by fp8scope.name_modules for a few steps, then runs one FP8
GEMM with torch._scaled_mm (E4M3, per-tensor scales), and writes what PyTorch's own casts say
about the tensors the hook sampled at the last step: for the BF16 operands, the MSE and cosine of
current scaling to E4M3 (x_hat = fp32(Q(x * s)) * fp32(1 / s), s = 448 / amax); for the FP8
operands, their dequantized amax. `compare` checks the daemon's metrics against those numbers.
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


def metric(text, name, labels):
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        body, value = line[len(name) + 1:].rsplit("} ", 1)
        pairs = dict(p.split("=", 1) for p in body.split(","))
        if all(pairs.get(k) == f'"{v}"' for k, v in labels.items()):
            return float(value)
    return None


def compare(expected_path, metrics_address):
    with open(expected_path) as f:
        expected = json.load(f)
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    failures, checked = [], 0
    for layer, operands in expected.items():
        for operand, stats in operands.items():
            tensor = {"job": "torch", "layer": layer, "gemm": "fprop", "operand": operand}
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
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
