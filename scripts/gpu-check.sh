#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, nvcc and CMake (none of the Debian packages the
# daemon needs): builds kernels/ and the checker for this GPU, then compares the CUDA engine with
# the CPU engine, the hardware FP8 cast with the software one, times the statistics against a
# device-to-device copy and the cuBLASLt GEMM check, and prints a table. With .carry/ from
# scripts/gpu-carry.sh beside it, it then runs the hook on the real libraries, block-scaled GEMMs
# included, and Transformer Engine's casts where TE is importable (see below).
# Finishes in a few minutes.
#   scripts/gpu-check.sh [CUDA architecture, default: the GPU's own, e.g. 90]
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${1:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')}"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFP8SCOPE_KERNELS_ONLY=ON -DFP8SCOPE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" > build-gpu.log 2>&1 || { cat build-gpu.log; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target fp8scope_gpu_check >> build-gpu.log 2>&1 || { tail -50 build-gpu.log; exit 1; }
build-gpu/kernels/fp8scope_gpu_check

# The hook with the real CUDA libraries (only when scripts/gpu-carry.sh brought the binaries built
# on Debian, with their libraries, in .carry/): tiny_trainer in BF16 and FP8 under `fp8scope run`
# (losses identical to a run without the hook), block-scaled FP8 (and MXFP8 and NVFP4 on sm_100)
# with the daemon's decoding checked against `fp8scope analyze` of the operands, then PyTorch (BF16 nn.Linear training and
# torch._scaled_mm FP8) under it, eagerly and captured in a CUDA graph, with the daemon's figures
# checked against PyTorch's own casts.
if [ -x .carry/bin/fp8scope ]; then
  carry="$PWD/.carry"
  export LD_LIBRARY_PATH="$carry/lib:${CUDA_HOME:-/usr/local/cuda}/lib64:${LD_LIBRARY_PATH:-}"
  work="$(mktemp -d)"
  "$carry/bin/fp8scoped" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --data-dir "$work/data" \
    --ready-file "$work/ready.json" --log-level warn > "$work/daemon.log" 2>&1 &
  daemon=$!
  trap 'kill "$daemon" 2>/dev/null' EXIT
  for _ in $(seq 300); do [ -s "$work/ready.json" ] && break; sleep 0.1; done
  read -r grpc metrics < <(python3 -c "import json; r = json.load(open('$work/ready.json')); print(r['grpc'], r['metrics'])")
  echo; echo "== hook: tiny_trainer on the real cuBLAS (daemon backend: $("$carry/bin/fp8scope" status --endpoint "$grpc" | head -1))"
  for mode in bf16 fp8; do
    "$carry/bin/tiny_trainer" --steps 30 --mode "$mode" --losses "$work/$mode.alone"
    "$carry/bin/fp8scope" run --endpoint "$grpc" --every 5 --job tiny --run "$mode" -- \
      "$carry/bin/tiny_trainer" --steps 30 --mode "$mode" --losses "$work/$mode.hooked"
    cmp -s "$work/$mode.alone" "$work/$mode.hooked" && echo "$mode: losses identical with and without the hook" \
      || echo "$mode: LOSSES DIFFER under the hook"
  done
  # The job's own block-scaled GEMMs on the real cuBLASLt: Float8BlockScaling's VEC128_32F and
  # BLK128x128_32F run on sm_90 (cuBLAS 12.9+); MXFP8's VEC32_UE8M0 and NVFP4's VEC16_UE4M3 need
  # sm_100, so on an H100/H200 they are compiled (tiny_trainer and the hook have them), not run.
  block_modes=(block)
  if [ "$arch" -ge 100 ]; then block_modes+=(mxfp8 nvfp4 nvfp4_row); else
    echo "mxfp8, nvfp4, nvfp4_row: need sm_100 (B200/GB200); compiled, not run on sm_$arch"; fi
  for mode in "${block_modes[@]}"; do
    "$carry/bin/tiny_trainer" --steps 8 --mode "$mode" --losses "$work/$mode.alone"
    mkdir -p "$work/dump-$mode"
    "$carry/bin/fp8scope" run --endpoint "$grpc" --every 5 --job "gpu-$mode" --run "gpu-$mode" -- \
      "$carry/bin/tiny_trainer" --steps 8 --mode "$mode" --losses "$work/$mode.hooked" \
      --dump-step 5 --dump-dir "$work/dump-$mode"
    cmp -s "$work/$mode.alone" "$work/$mode.hooked" && echo "$mode: losses identical with and without the hook" \
      || echo "$mode: LOSSES DIFFER under the hook"
    sleep 3  # the last samples are analyzed asynchronously
    python3 scripts/gpu_block_check.py "$carry/bin/fp8scope" "$metrics" "gpu-$mode" "$mode" "$work/dump-$mode" || true
  done
  # Mixture of experts on the real cuBLAS: every expert GEMM form the hook reads, the gather kernel
  # JIT-compiled by this driver. cuBLASLt's grouped layouts need cuBLAS 13.2+ and sm_100 (13.4+
  # adds Hopper); the cuBLAS batched and grouped calls and the per-expert loop run anywhere.
  lt_version=$(python3 - "$carry/lib" <<'PY' 2>/dev/null || echo 0
import ctypes, glob, sys
libs = glob.glob(sys.argv[1] + "/libcublasLt.so.*") or ["libcublasLt.so.13"]
print(ctypes.CDLL(libs[0]).cublasLtGetVersion())
PY
)
  moe_forms=(cublas-grouped batched loop)
  if [ "$lt_version" -ge 130400 ] || { [ "$lt_version" -ge 130200 ] && [ "$arch" -ge 100 ]; }; then
    moe_forms=(lt-grouped "${moe_forms[@]}")
  else
    echo "moe lt-grouped: cuBLASLt $lt_version on sm_$arch has no grouped GEMM (13.2+ on sm_100, 13.4+ on sm_90)"
  fi
  moe_run() {  # FORM RECIPE: the trainer alone and under the hook, the same losses
    local name="moe-$2-$1"
    "$carry/bin/tiny_trainer" --steps 12 --mode moe --moe-gemm "$1" --moe-recipe "$2" --losses "$work/$name.alone"
    "$carry/bin/fp8scope" run --endpoint "$grpc" --every 5 --job gpu-moe --run "$name" -- \
      "$carry/bin/tiny_trainer" --steps 12 --mode moe --moe-gemm "$1" --moe-recipe "$2" --losses "$work/$name.hooked"
    cmp -s "$work/$name.alone" "$work/$name.hooked" && echo "moe $2 $1: losses identical with and without the hook" \
      || echo "moe $2 $1: LOSSES DIFFER under the hook"
  }
  for form in "${moe_forms[@]}"; do moe_run "$form" bf16; done
  # MXFP8 experts, each group's block scales gathered on the device: cuBLASLt has VEC32_UE8M0 on
  # sm_100 and later only, grouped from cuBLAS 13.3 (TE's CUBLAS_MXFP8_GROUPED_GEMM_VERSION).
  if [ "$arch" -ge 100 ]; then
    moe_run loop mxfp8
    if [ "$lt_version" -ge 130300 ]; then moe_run lt-grouped mxfp8; else echo "moe mxfp8 lt-grouped: cuBLASLt $lt_version (13.3+)"; fi
  else
    echo "moe mxfp8: cuBLASLt has MXFP8 on sm_100 and later, this is sm_$arch"
  fi
  sleep 3
  echo "moe: $("$carry/bin/fp8scope" tensors --endpoint "$grpc" --json | grep -c '"expert"' || true) expert tensors reached the daemon"
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PYTHONPATH="$PWD/client/python" "$carry/bin/fp8scope" run --endpoint "$grpc" --every 1 --job torch -- \
      python3 scripts/gpu_torch_check.py train "$work/expected.json"
    sleep 5  # the last samples are analyzed asynchronously
    python3 scripts/gpu_torch_check.py compare "$work/expected.json" "$metrics" || true
    # The same GEMMs, BF16 and FP8, captured into a CUDA graph and replayed: sampled at replays.
    PYTHONPATH="$PWD/client/python" "$carry/bin/fp8scope" run --endpoint "$grpc" --every 1 --job torch-graph -- \
      python3 scripts/gpu_torch_check.py graph "$work/graph.json"
    sleep 5
    python3 scripts/gpu_torch_check.py compare "$work/graph.json" "$metrics" torch-graph || true
  else
    echo "torch and CUDA graphs: not checked: PyTorch with CUDA does not import here"
  fi
  # Transformer Engine's casts on the real TE, where it is importable: a LayerNormMLP and a Linear
  # trained under TE's autocast, the daemon's code check of fp8scope's model against TE's codes.
  # Elsewhere (the stand-in in tests/fixtures/te/ is what CI checks) it says why not.
  if te_why=$(python3 -c "import transformer_engine.pytorch" 2>&1); then
    te_recipes=(delayed current)
    if [ "$arch" -ge 100 ]; then te_recipes+=(mxfp8 nvfp4); fi
    for recipe in "${te_recipes[@]}"; do
      "$carry/bin/fp8scope" run --endpoint "$grpc" --every 1 --job "te-$recipe" -- \
        python3 scripts/gpu_te_check.py train "$recipe" || echo "te $recipe: the TE run failed"
    done
    sleep 3
    for recipe in "${te_recipes[@]}"; do python3 scripts/gpu_te_check.py check "$metrics" "te-$recipe" || true; done
  else
    echo "TE casts: not checked on this GPU: transformer_engine.pytorch does not import (${te_why##*$'\n'})"
  fi
  "$carry/bin/fp8scope" status --endpoint "$grpc"
  "$carry/bin/fp8scope" tensors --endpoint "$grpc" --top 12
fi
