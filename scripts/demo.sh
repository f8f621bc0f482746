#!/usr/bin/env bash
# The README's demo: make realistic tensors with NumPy and show what each FP8 recipe does to them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FP8SCOPE_BUILD:-build}  # the build folder (tests pass theirs)
fp8scope="$build/cli/fp8scope"
mkdir -p "$build/demo"
/usr/bin/python3 scripts/make_demo_tensors.py "$build/demo"

echo; echo "== BF16 activations with outlier channels, every recipe, E4M3"
"$fp8scope" analyze "$build/demo/activations_bf16.npy" --dtype bf16
echo; echo "== Small weight gradients: E4M3 underflows where E5M2 does not"
"$fp8scope" analyze "$build/demo/gradients.npy" --recipe tensor_current --recipe mxfp8
"$fp8scope" analyze "$build/demo/gradients.npy" --recipe tensor_current --recipe mxfp8 --format e5m2
echo; echo "== A stale delayed-scaling scale (from a step when gradients were 10x smaller) clips"
"$fp8scope" analyze "$build/demo/gradients.npy" --recipe tensor_delayed --format e5m2 --scale 2e9

echo; echo "== The daemon: a training job streams samples over four steps (gradients grow 4x a step)"
data=$build/demo/daemon-data
rm -rf "$data" && mkdir -p "$data"
"$build/server/fp8scoped" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --data-dir "$data" \
  --ready-file "$data/ready.json" --log-level warn &
daemon=$!
trap 'kill "$daemon" 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$data/ready.json" ] && break; sleep 0.1; done
read -r grpc metrics < <(/usr/bin/python3 -c "import json; r = json.load(open('$data/ready.json')); print(r['grpc'], r['metrics'])")
# Each step's tensors in a folder of their own: demo/*.npy stay what the analyses above printed.
for step in 1 2 3 4; do
  mkdir -p "$build/demo/step$step"
  /usr/bin/python3 scripts/make_demo_tensors.py "$build/demo/step$step" "$step" > /dev/null
  "$fp8scope" push "$build/demo/step$step/activations_bf16.npy" --dtype bf16 --endpoint "$grpc" --job demo --run pushed \
    --layer blocks.0.attn.qkv --gemm fprop --operand x --step "$step"
  "$fp8scope" push "$build/demo/step$step/gradients.npy" --endpoint "$grpc" --job demo --run pushed \
    --layer blocks.0.mlp.fc1 --gemm wgrad --operand dy --step "$step"
done
for _ in $(seq 100); do  # the last samples are analyzed asynchronously
  "$fp8scope" status --endpoint "$grpc" --json | grep -q '"samples_analyzed":"8"' && break
  sleep 0.1
done
echo; echo "== fp8scope tensors --sort overflow --recipe tensor_delayed"
"$fp8scope" tensors --endpoint "$grpc" --sort overflow --recipe tensor_delayed
echo; echo "== /metrics excerpt"
/usr/bin/python3 - "$metrics" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics").read().decode()
for line in text.splitlines():
    if line.startswith(("fp8scope_overflow_ratio", "fp8scope_scale{", "fp8scope_samples_total", "fp8scope_clients")):
        if "recipe" not in line or "tensor_" in line:
            print(line)
PY

trainer="$build/tests/trainer/tiny_trainer"
if [ -x "$trainer" ]; then
  echo; echo "== The hook: a small MLP trains through cuBLASLt/cuBLAS (CPU stand-ins for the GPU libraries)"
  echo "   under fp8scope run, in BF16 and then in FP8 with delayed scaling; every 4th step is sampled;"
  echo "   both see the same planted data outlier at step 60 (one input feature 64x out of range)"
  for mode in bf16 fp8; do
    "$fp8scope" run --endpoint "$grpc" --every 4 --job tiny --run "$mode" -- \
      "$trainer" --steps 120 --mode "$mode" --outlier-step 60 --save-weights "$build/demo/$mode.weights" \
      --losses "$build/demo/$mode.losses"
  done
  echo "   and an FP8 inference job serving the BF16 run's weights (current scaling, as a PTQ export casts)"
  "$fp8scope" run --endpoint "$grpc" --every 4 --job tiny --run serve-fp8 -- \
    "$trainer" --steps 40 --step-sleep-ms 25 --mode fp8 --serve "$build/demo/bf16.weights"
  for _ in $(seq 600); do  # every sample received is analyzed
    /usr/bin/python3 -c "import json, sys; s = json.load(sys.stdin); sys.exit(s['samples_received'] != s['samples_analyzed'])" \
      < <("$fp8scope" status --endpoint "$grpc" --json) && break
    sleep 0.1
  done
  echo; echo "== fp8scope tensors --sort underflow --top 8 (what each tensor would lose in E4M3/E5M2 under current scaling)"
  "$fp8scope" tensors --endpoint "$grpc" --sort underflow --top 8
  echo; echo "== fp8scope tensors --recipe observed --top 6 (the FP8 run's own scales: delayed vs what current scaling would use)"
  "$fp8scope" tensors --endpoint "$grpc" --recipe observed --top 6
fi
echo; echo "== fp8scope status"
"$fp8scope" status --endpoint "$grpc"
kill -TERM "$daemon"; wait "$daemon"; trap - EXIT  # SIGTERM drains: every record is in the history

if [ -x "$trainer" ]; then
  echo; echo "== The planted outlier, step by step: training loss of each run around step 60"
  /usr/bin/python3 - "$build/demo/bf16.losses" "$build/demo/fp8.losses" <<'PY'
import sys
bf16, fp8 = ([float.fromhex(line) for line in open(path)] for path in sys.argv[1:3])
print("   step      bf16        fp8")
for step in range(58, 67):
    print(f"   {step:4d}  {bf16[step]:9.4g}  {fp8[step]:9.4g}")
peak = max(range(58, 67), key=lambda step: bf16[step])
back = next(step for step in range(61, len(fp8)) if fp8[step] < 1.5 * fp8[59])
print(f"""   BF16 carries the 64x input at full size: step 60's weight update is far too large, and its loss
   climbs for {peak - 60} more steps to a peak at step {peak} ({bf16[peak] / bf16[59]:.0f}x step 59's) before it comes back.
   FP8 with delayed scaling clips the outlier at E4M3's maximum (the saturation compare names below):
   that batch's loss rises {fp8[60] / fp8[59]:.1f}x, but the clipped update is small and the loss is back by
   step {back}. The data event hurts BF16 more; compare's verdict below finds nothing that sets FP8 apart.""")
PY
  echo; echo "== fp8scope compare --run fp8 --baseline bf16 (the loss, from the hook's C API)"
  "$fp8scope" compare --data-dir "$data" --run fp8 --baseline bf16
  echo; echo "== fp8scope advise --run fp8 --baseline bf16 --top 8 (the FP8 run's what-ifs come from the BF16 tensors)"
  "$fp8scope" advise --data-dir "$data" --run fp8 --baseline bf16 --top 8
  echo; echo "== fp8scope compare --run serve-fp8 --baseline bf16 (the inference check: the served weights are the trained ones)"
  "$fp8scope" compare --data-dir "$data" --run serve-fp8 --baseline bf16
  echo; echo "== fp8scope report --run fp8 --baseline bf16"
  "$fp8scope" report --data-dir "$data" --run fp8 --baseline bf16 -o "$build/demo/report.html"
  echo "   open $build/demo/report.html in a browser (one file, no network needed)"

  echo; echo "== The BF16 run's weights exported to FP8 for serving, once right and once with mlp.1's scale inverted"
  /usr/bin/python3 scripts/export_demo_checkpoint.py "$build/demo/bf16.weights" "$build/demo/checkpoints"
  ckpt=$build/demo/checkpoints
  echo; echo "== fp8scope checkpoint fp8 --reference bf16 --run bf16 (the export is what training produced: exit 0)"
  "$fp8scope" checkpoint "$ckpt/fp8" --reference "$ckpt/bf16" --run bf16 --data-dir "$data"
  echo; echo "== fp8scope checkpoint fp8-inverted --reference bf16 (a CI gate: exit 1 names the broken weight)"
  status=0
  "$fp8scope" checkpoint "$ckpt/fp8-inverted" --reference "$ckpt/bf16" -o "$build/demo/checkpoint.html" || status=$?
  [ "$status" -eq 1 ] || { echo "demo: expected fp8scope checkpoint to fail the inverted export (exit 1), got $status" >&2; exit 1; }
  echo "   exit status $status; the page: $build/demo/checkpoint.html"
fi
