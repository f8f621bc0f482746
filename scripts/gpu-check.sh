#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, nvcc and CMake (none of the Debian packages the
# daemon needs): builds kernels/ and the checker for this GPU, then compares the CUDA engine with
# the CPU engine, the hardware FP8 cast with the software one, times the statistics against a
# device-to-device copy and the cuBLASLt GEMM check, and prints a table. Finishes in a few minutes.
#   scripts/gpu-check.sh [CUDA architecture, default: the GPU's own, e.g. 90]
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${1:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')}"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFP8SCOPE_KERNELS_ONLY=ON -DFP8SCOPE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" > build-gpu.log 2>&1 || { cat build-gpu.log; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target fp8scope_gpu_check >> build-gpu.log 2>&1 || { tail -50 build-gpu.log; exit 1; }
build-gpu/kernels/fp8scope_gpu_check
