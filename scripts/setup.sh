#!/usr/bin/env bash
# Installs every dependency Trellis builds and tests with (Debian packages). Idempotent and
# non-interactive: safe to run again, and in CI.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libtorch-dev libopenblas0-pthread          # tensors/autograd; OpenBLAS keeps fp32 matmul fast
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libicu-dev                     # tokenizer regexes (Unicode classes), NFC
  libgtest-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
