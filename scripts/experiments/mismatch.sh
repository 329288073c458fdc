#!/usr/bin/env bash
# The train/inference mismatch experiment of docs/experiments.md: a tiny model warm-started with
# `trellis sft` on reverse_text, then `trellis rl` with Gaussian noise injected into the behaviour
# log-probs (rl.behaviour_noise), under each mismatch correction (none, TIS, IcePop) and with plain
# or two-sided clipping. Prints one summary row per run (python3 reads metrics.jsonl).
#
#   scripts/experiments/mismatch.sh [OUT_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/mismatch}
steps=${2:-30}
bin=build/trellis
mkdir -p "$out"
# The README's example; 4 optimizer steps per rollout step so that r moves away from 1.
config=(examples/reverse_text.toml --set compute.threads=2 --set sft.eval_tasks=0
  --set trainer.optimizer_steps=4 --set trainer.checkpoint_every=0)
if [ ! -f "$out/warm/config.json" ]; then
  "$bin" model init --preset tiny --seed 1 --out "$out/base" >/dev/null
  "$bin" sft "${config[@]}" --set model.path="$out/base" --set sft.out="$out/warm" --run-dir "$out/sft"
fi
run() {  # name, then --set overrides
  local name=$1
  shift
  [ -f "$out/$name/metrics.jsonl" ] && [ "$(wc -l < "$out/$name/metrics.jsonl")" -ge "$steps" ] && return
  "$bin" rl "${config[@]}" --set model.path="$out/warm" --set rl.steps="$steps" "$@" \
    --run-dir "$out/$name" > "$out/$name.log" 2>&1
}
run clean --set loss.mismatch=icepop
for noise in 0.5; do
  for mismatch in none tis icepop; do
    run "noise${noise}-${mismatch}-twosided" --set rl.behaviour_noise=$noise --set loss.mismatch=$mismatch
  done
  run "noise${noise}-none-plain" --set rl.behaviour_noise=$noise --set loss.mismatch=none \
    --set loss.clip_delta=inf
  run "noise${noise}-icepop-plain" --set rl.behaviour_noise=$noise --set loss.mismatch=icepop \
    --set loss.clip_delta=inf
done
python3 - "$out" "$steps" <<'PY'
import json, sys, pathlib
out, steps = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def mean(rows, key): return sum(r.get(key) or 0 for r in rows) / max(1, len(rows))
print("| run | reward first 5 | reward last 5 | reward by step (every 5) | mismatch/k3 | masked low/high | clip low/high/δ | grad norm |")
print("|---|---|---|---|---|---|---|---|")
for d in sorted(p for p in out.iterdir() if (p / "metrics.jsonl").exists() and p.name != "sft"):
    rows = [json.loads(l) for l in open(d / "metrics.jsonl")]
    curve = " ".join(f"{mean(rows[i:i+5], 'reward/task'):.2f}" for i in range(0, len(rows), 5))
    print(f"| {d.name} | {mean(rows[:5], 'reward/task'):.3f} | {mean(rows[-5:], 'reward/task'):.3f} | {curve} "
          f"| {mean(rows, 'mismatch/k3'):.3f} | {mean(rows, 'mismatch/masked_low_frac'):.3f} / {mean(rows, 'mismatch/masked_high_frac'):.3f} "
          f"| {mean(rows, 'clip/low_frac'):.3f} / {mean(rows, 'clip/high_frac'):.3f} / {mean(rows, 'clip/delta_frac'):.4f} "
          f"| {mean(rows, 'grad_norm'):.2f} |")
PY
