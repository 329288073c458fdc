#!/usr/bin/env bash
# Configures (once) and builds Trellis into build/ with Ninja. BUILD_DIR overrides the folder.
# Arguments name the targets to build (e.g. `trellis`, the binary alone); none = everything,
# tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
