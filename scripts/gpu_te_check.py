"""Transformer Engine's casts on a GPU (scripts/gpu-check.sh runs this where TE is importable).

    gpu_te_check.py train RECIPE       # under `fp8scope run --every 1`; RECIPE: delayed, current, mxfp8, nvfp4
    gpu_te_check.py check METRICS JOB  # METRICS: the daemon's host:port

`train` trains a te.pytorch.LayerNormMLP and a te.pytorch.Linear a few steps under TE's autocast
in the recipe named, so the hook sees TE's real casts: the fused norm and activation where TE
fuses them, nvte_quantize_v2 elsewhere. `check` reads the daemon's metrics: samples arrived with
their cast, and the daemon's code check of fp8scope's model against TE's codes found no
mismatch (a recompute of a fused kernel may differ in a few codes on a GPU: those are named).
"""
import re
import sys
import urllib.request

STEPS = 4


def train(name):
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    recipes = {
        "delayed": lambda: recipe.DelayedScaling(),
        "current": lambda: recipe.Float8CurrentScaling(),
        "mxfp8": lambda: recipe.MXFP8BlockScaling(),
        "nvfp4": lambda: recipe.NVFP4BlockScaling(),
    }
    torch.manual_seed(0)
    mlp = te.LayerNormMLP(256, 1024, params_dtype=torch.bfloat16).cuda()
    out = te.Linear(256, 256, params_dtype=torch.bfloat16).cuda()
    opt = torch.optim.SGD(list(mlp.parameters()) + list(out.parameters()), lr=1e-3)
    for step in range(STEPS):
        x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
        # TE 2.x's fp8_autocast became autocast (with `recipe`) in later releases.
        autocast = (te.autocast(enabled=True, recipe=recipes[name]()) if hasattr(te, "autocast")
                    else te.fp8_autocast(enabled=True, fp8_recipe=recipes[name]()))
        with autocast:
            y = out(mlp(x))
        y.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()


def check(metrics, job):
    text = urllib.request.urlopen(f"http://{metrics}/metrics").read().decode()
    def series(name):
        out = {}
        for m in re.finditer(name + r"\{([^}]*)\} (\S+)", text):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("job") == job:
                out[tuple(sorted(labels.items()))] = float(m.group(2))
        return out
    samples = sum(series("fp8scope_cast_samples_total").values())
    compared = series("fp8scope_cast_codes_compared_total")
    mismatches = series("fp8scope_cast_code_mismatches_total")
    print(f"TE casts {job}: {samples:.0f} samples came with their cast")
    ok = samples > 0
    for key, n in sorted(compared.items()):
        bad = mismatches.get(key, 0.0)
        recipe = dict(key)["recipe"]
        print(f"  {recipe}: {bad:.0f} of {n:.0f} codes differ from fp8scope's model")
        ok = ok and bad == 0
    print(f"TE casts {job}: {'OK' if ok else 'CHECK'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3]))
