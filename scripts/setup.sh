#!/usr/bin/env bash
# Installs what fp8scope needs on Debian 12 (idempotent: only missing packages are installed) and
# builds into build/ what the demo runs, or everything with --all (scripts/test.sh).
# Usage: scripts/setup.sh [--no-build | --all]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev prometheus-cpp-dev libsqlite3-dev nlohmann-json3-dev libcli11-dev
  libyaml-cpp-dev  # `--te-config`: Transformer Engine debug-API (nvdlfw_inspect) YAML
  libpq-dev postgresql  # history in PostgreSQL; the tests start a real server (initdb, loopback)
  catch2 libbenchmark-dev prometheus python3-numpy python3-yaml openssl systemd
  clang libclang-rt-14-dev
  chromium  # the report test opens the HTML report in headless chromium
  python3-torch  # the Python helper test names real torch.nn modules (CPU build)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[ "${1:-}" = "--no-build" ] && exit 0
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
if [ "${1:-}" = "--all" ]; then
  cmake --build build -j2
else
  cmake --build build -j2 --target fp8scope_demo
fi
