#!/usr/bin/env bash
# Builds Trellis for NVIDIA GPUs into build-cuda/, against the CUDA libtorch inside the Python
# environment's PyTorch wheel (>= 2.4; Debian's libtorch, which scripts/setup.sh installs for the
# CPU build, has no CUDA). Run scripts/setup.sh first for the other dependencies.
# Usage: scripts/build_cuda.sh [TARGET ...]    (no TARGET: everything, tests included)
# Environment: TORCH_CUDA_ARCH_LIST (default: this machine's GPUs), CUDA_HOME (default
# /usr/local/cuda), CMAKE_ARGS (passed to cmake).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

if ! python3 -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
  echo "build_cuda: python3 has no CUDA build of PyTorch; install one (pip install torch) and run" \
    "this again" >&2
  exit 1
fi
if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "build_cuda: no nvcc at $CUDA_HOME/bin/nvcc (the CUDA toolkit libtorch's CMake files need);" \
    "install it or set CUDA_HOME" >&2
  exit 1
fi
# The compute capabilities of this machine's GPUs, e.g. "9.0" on an H100 or H200.
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$(python3 -c 'import torch
caps = sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
print(";".join(caps) or "9.0")')
fi
export TORCH_CUDA_ARCH_LIST
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
echo "build_cuda: torch $(python3 -c 'import torch; print(torch.__version__)'), CUDA arch" \
  "$TORCH_CUDA_ARCH_LIST"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S "$ROOT" -B "$ROOT/build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" \
  -DCUDAToolkit_ROOT="$CUDA_HOME" -DTRELLIS_CUDA_KERNELS=ON ${CMAKE_ARGS:-}
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$ROOT/build-cuda" -j "$(nproc)" "${targets[@]}"
