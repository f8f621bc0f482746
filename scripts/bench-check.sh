#!/bin/bash
# The engine, ingest and hook call benchmarks against the README's figures (a minute or two): run
# it when the ingest path, the engine or the hook changed. See scripts/bench_check.py.
#   scripts/bench-check.sh [--build DIR] [--repetitions N]
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/bench_check.py "$@"
