#!/usr/bin/env bash
# Installs, builds, then shows Trellis's model core end to end: initialise a small Qwen2-style
# model in the Hugging Face layout, inspect it, and generate from it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
MODEL_DIR=${MODEL_DIR:-runs/quickstart-model}
./build/trellis model init --arch qwen2 --preset small --out "$MODEL_DIR" --seed 0
./build/trellis model info "$MODEL_DIR"
./build/trellis generate --model "$MODEL_DIR" --prompt "hello" --max-tokens 32 --seed 0
