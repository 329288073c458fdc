#!/usr/bin/env bash
# Installs, builds, then runs the quickstart: an SFT warm start of the tiny model (cached in
# runs/quickstart-cache after the first time), then `trellis run examples/quickstart.toml` — an
# orchestrator, a trainer and two inference workers as separate processes on loopback, training the
# model to reverse text while the live view shows the reward rising. Extra arguments go to
# `trellis quickstart` (e.g. --set rl.steps=100, --run-dir runs/mine).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh trellis  # the binary alone: the tests build with ./scripts/test.sh
exec ./build/trellis quickstart "$@"
