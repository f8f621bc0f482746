#!/usr/bin/env bash
# Builds fp8scope and runs every test: the Release build's full suite, then the unit and integration
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer. Installs missing packages first.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j2 --timeout 900

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8SCOPE_SANITIZE=ON \
  -DFP8SCOPE_CUDA=OFF -DFP8SCOPE_BUILD_BENCH=OFF
cmake --build build-asan -j2
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j2 --timeout 1800 -L "unit|integration"
echo "test: all passed"
