#!/usr/bin/env bash
# The README's demo: make realistic tensors with NumPy and show what each FP8 recipe does to them.
set -euo pipefail
cd "$(dirname "$0")/.."
fp8scope=build/client/cli/fp8scope
mkdir -p build/demo
/usr/bin/python3 scripts/make_demo_tensors.py build/demo

echo; echo "== BF16 activations with outlier channels, every recipe, E4M3"
"$fp8scope" analyze build/demo/activations_bf16.npy --dtype bf16
echo; echo "== Small weight gradients: E4M3 underflows where E5M2 does not"
"$fp8scope" analyze build/demo/gradients.npy --recipe tensor_current --recipe mxfp8
"$fp8scope" analyze build/demo/gradients.npy --recipe tensor_current --recipe mxfp8 --format e5m2
echo; echo "== A stale delayed-scaling scale (from a step when gradients were 10x smaller) clips"
"$fp8scope" analyze build/demo/gradients.npy --recipe tensor_delayed --format e5m2 --scale 2e9
