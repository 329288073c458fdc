#!/usr/bin/env bash
# The sharded trainer's scaling on this machine (docs/benchmarks.md, "The sharded trainer"):
# `trellis rl` on a fresh model of PRESET for each RANKSxTHREADS layout, every run on the same
# samples (all batches from the initial policy; the length reward gives the groups a signal).
# Prints one row per layout: the trainer's tokens/s, step time, time in collectives, MFU over all
# ranks, and the optimizer state each rank holds, averaged over the steps after the first.
#
#   scripts/bench_ranks.sh [PRESET] [LAYOUT...]     (default: tiny 1x1 1x2 2x1)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TRELLIS="${TRELLIS:-$ROOT/build/trellis}"
PRESET="${1:-tiny}"
shift || true
LAYOUTS=("$@")
[ ${#LAYOUTS[@]} -gt 0 ] || LAYOUTS=(1x1 1x2 2x1)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$TRELLIS" model init --preset "$PRESET" --seed 1 --out "$WORK/model" >/dev/null
echo "| ranks x threads | train tok/s | train s/step | comm s/step | MFU (all ranks) | optimizer MiB per rank |"
echo "|---|---|---|---|---|---|"
for layout in "${LAYOUTS[@]}"; do
  ranks="${layout%x*}"
  threads="${layout#*x}"
  "$TRELLIS" rl "$ROOT/examples/reverse_text.toml" --set model.path="$WORK/model" \
    --nproc "$ranks" --threads "$threads" --run-dir "$WORK/run-$layout" \
    --set rl.steps=4 --set rl.batch_size=64 --set rl.group_size=8 --set rl.async_level=4 \
    --set rl.max_tokens=64 --set 'env.length.targets=[16, 32]' --set env.length.alpha=0.01 \
    --set trainer.checkpoint_every=0 >"$WORK/$layout.log" 2>&1 ||
    { echo "bench_ranks: $layout failed:" >&2; tail -20 "$WORK/$layout.log" >&2; exit 1; }
  python3 - "$WORK/run-$layout/metrics.jsonl" "$layout" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])][1:]
mean = lambda k: sum(r.get(k, 0) for r in rows) / len(rows)
print(f"| {sys.argv[2]} | {mean('throughput/train_tok_s'):,.0f} | {mean('time/train'):.2f} | "
      f"{mean('time/comm'):.3f} | {100 * mean('throughput/mfu'):.1f}% | {rows[0]['memory/optimizer_mib']:.1f} |")
PY
done
