#!/usr/bin/env bash
# Builds fp8scope and runs every test: the Release build's full suite; the unit and integration
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer; then the ingest fuzzer for a
# bounded time (FP8SCOPE_FUZZ_SECONDS, default 60). Installs missing packages first. Each stage
# prints how long it took, so CI's time can be read off its log.
set -euo pipefail
cd "$(dirname "$0")/.."

stage() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test: $name took $((SECONDS - start)) s"
}

stage "setup and Release build" bash scripts/setup.sh --all
stage "Release tests" ctest --test-dir build --output-on-failure -j2 --timeout 900

# -O1 -g1 (line tables): what sanitizer reports need, and the build compiles faster than -O2 -g.
stage "sanitizer build" bash -c 'cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DFP8SCOPE_SANITIZE=ON -DFP8SCOPE_CUDA=OFF \
    -DFP8SCOPE_BUILD_BENCH=OFF && cmake --build build-asan -j2'
stage "sanitizer tests" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j2 --timeout 1800 -L "unit|integration"
# The libFuzzer target for the daemon's input path, built with clang, for a bounded time.
stage "fuzzer build" bash -c 'CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFP8SCOPE_FUZZ=ON -DFP8SCOPE_CUDA=OFF && cmake --build build-fuzz -j2 --target ingest_fuzz'
mkdir -p build-fuzz/corpus
stage "fuzzing" build-fuzz/tests/fuzz/ingest_fuzz -max_total_time="${FP8SCOPE_FUZZ_SECONDS:-60}" -rss_limit_mb=4096 \
  -print_final_stats=1 build-fuzz/corpus
echo "test: all passed in $SECONDS s"
