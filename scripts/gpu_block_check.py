"""The hook's block-scaled operands on a GPU's real cuBLASLt (scripts/gpu-check.sh runs this).

    gpu_block_check.py FP8SCOPE METRICS JOB MODE DUMP_DIR

tiny_trainer --mode MODE ran under `fp8scope run --job JOB` and dumped the codes and scale tensor
of every operand of its last sampled step (DUMP_DIR/mlp.L.GEMM.OP.npy and .scales.npy) as it
passed them to cublasLtMatmul. For each one, `fp8scope analyze` of the dump with its scale layout
is the reference; the daemon's metrics for that tensor (its decoding of what the hook captured)
must agree: amax, zero ratio and saturation of the job's own codes, and the share of block
scales at the scale format's floor and ceiling.
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

# TE's layouts per recipe and operand (as tests/integration/hook_test.cc's kBlockModes).
MODES = {
    "block": ("e4m3", {"x": "vec128_32f", "w": "blk128x128_32f", "dy": "vec128_32f"}),
    "mxfp8": ("e4m3", {"x": "vec32_ue8m0", "w": "vec32_ue8m0", "dy": "vec32_ue8m0"}),
    "nvfp4": ("e2m1", {"x": "vec16_ue4m3", "w": "vec16_ue4m3", "dy": "vec16_ue4m3"}),
    "nvfp4_row": ("e2m1", {"x": "vec16_ue4m3_row_scaled", "w": "vec16_ue4m3", "dy": "vec16_ue4m3"}),
}
TENSOR_KEYS = ("amax", "zero_ratio")
OBSERVED_KEYS = ("saturation_ratio", "block_scale_floor_ratio", "block_scale_ceiling_ratio")
SERIES = re.compile(r'^(fp8scope_[a-z0-9_]+)\{([^}]*)\} (\S+)$')


def metrics(host_port):
    series = {}
    with urllib.request.urlopen(f"http://{host_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            m = SERIES.match(line)
            if m:
                labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
                series[(m.group(1), labels)] = float(m.group(3))
    return series


def main():
    cli, host_port, job, mode, dump = sys.argv[1:6]
    codes, layouts = MODES[mode]
    exposition = metrics(host_port)
    failures = checked = 0
    for name in sorted(os.listdir(dump)):
        if not name.endswith(".npy") or name.endswith(".scales.npy"):
            continue
        layer, gemm, operand = name[:-4].rsplit(".", 2)
        base = os.path.join(dump, name[:-4])
        reference = json.loads(subprocess.run(
            [cli, "analyze", base + ".npy", "--dtype", codes, "--json", "--scale-layout", layouts[operand],
             "--scales", base + ".scales.npy"], check=True, capture_output=True, text=True).stdout)
        tensor = {("job", job), ("layer", layer + "#0"), ("gemm", gemm), ("operand", operand)}
        observed = tensor | {("recipe", "observed"), ("format", codes)}
        for keys, labels in ((TENSOR_KEYS, tensor), (OBSERVED_KEYS, observed)):
            for key in keys:
                got = exposition.get((f"fp8scope_{key}", frozenset(labels)))
                want = reference[key]
                ok = got is not None and abs(got - want) <= 1e-6 * max(1.0, abs(want))
                failures += not ok
                checked += 1
                if not ok:
                    print(f"{mode} {layer} {gemm} {operand} {key}: daemon {got}, analyze of the dump {want}")
    print(f"{mode}: {checked} figures of {checked // len(TENSOR_KEYS + OBSERVED_KEYS)} operands, "
          f"{failures} differ from `fp8scope analyze` of the job's own codes and scales")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
