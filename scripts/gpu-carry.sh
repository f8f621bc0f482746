#!/usr/bin/env bash
# Run on the Debian build machine before the GPU check: gathers the binaries the GPU check's hook
# stage needs from build/ into .carry/ (the installed layout: bin/, lib/fp8scope/) with every
# shared library they load that a CUDA image lacks (not glibc, not the C++ runtime, not CUDA).
# The GPU machine then runs scripts/gpu-check.sh with .carry/ copied beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .carry
mkdir -p .carry/bin .carry/lib/fp8scope
cp build/cli/fp8scope build/server/fp8scoped build/client/shipper/fp8scope-shipper \
  build/tests/trainer/tiny_trainer .carry/bin/
cp build/client/hook/libfp8scope_hook.so .carry/lib/fp8scope/
[ -f build/kernels/libfp8scope_cuda.so ] && cp build/kernels/libfp8scope_cuda.so .carry/lib/fp8scope/
for f in .carry/bin/* .carry/lib/fp8scope/*.so; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s)\.so|/ld-linux|/libcuda\.so|/libcublas|/libcudart|/cuda|/tests/fixtures/' |
  xargs -r cp -L -t .carry/lib/
du -sh .carry
