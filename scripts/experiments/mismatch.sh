#!/usr/bin/env bash
# The train/inference mismatch experiment of docs/experiments.md: a tiny model warm-started with
# `trellis sft` on reverse_text, then `trellis rl` with a real train/inference mismatch injected (the
# engine samples at rl.behaviour_temperature while the trainer scores at temperature 1), under each
# mismatch correction (none, TIS, IcePop) and with plain or two-sided clipping. Prints one summary
# row per run (python3 reads metrics.jsonl).
#
#   scripts/experiments/mismatch.sh [OUT_DIR] [STEPS]     (THREADS=1 to leave a core to other work)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/mismatch}
steps=${2:-40}
bin=build/trellis
mkdir -p "$out"
# The README's example (4 optimizer steps per rollout step, so r moves away from 1 within a step).
config=(examples/reverse_text.toml --set compute.threads="${THREADS:-2}" --set sft.eval_tasks=0
  --set trainer.checkpoint_every=0)
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
for t in 1.3; do
  for mismatch in none tis icepop; do
    run "T${t}-${mismatch}-twosided" --set rl.behaviour_temperature=$t --set loss.mismatch=$mismatch
  done
  run "T${t}-none-plain" --set rl.behaviour_temperature=$t --set loss.mismatch=none \
    --set loss.clip_delta=inf
  run "T${t}-icepop-plain" --set rl.behaviour_temperature=$t --set loss.mismatch=icepop \
    --set loss.clip_delta=inf
done
# Each final policy (and the warm start) on a fixed set at temperature 1, the trainer's policy:
# the rewards above are of the behaviour samples, which the hotter sampler lowers.
for d in "$out"/warm "$out"/*/checkpoints/step_"$steps"; do
  [ -d "$d" ] || continue
  result=$(dirname "$(dirname "$d")")/eval.txt
  [ "$d" = "$out/warm" ] && result=$out/warm-eval.txt
  [ -f "$result" ] || "$bin" eval --model "$d" --config examples/reverse_text.toml --n 100 --k 8 \
    --max-tokens 32 --seed 991 --threads "${THREADS:-2}" > "$result" 2>&1
done
python3 - "$out" "$steps" <<'PY'
import json, sys, pathlib
out, steps = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def mean(rows, key): return sum(r.get(key) or 0 for r in rows) / max(1, len(rows))
def eval_reward(path):
    for line in open(path):
        if line.startswith("reward "): return line.split()[1]
    return "?"
print(f"warm start, evaluation set at temperature 1: reward {eval_reward(out / 'warm-eval.txt')}")
print("| run | reward first 10 | reward last 10 | reward by step (every 10) | mismatch/k3 | masked low/high | clip low/high/δ | grad norm | eval set, T = 1 |")
print("|---|---|---|---|---|---|---|---|---|")
for d in sorted(p for p in out.iterdir() if (p / "metrics.jsonl").exists() and p.name != "sft"):
    rows = [json.loads(l) for l in open(d / "metrics.jsonl")]
    curve = " ".join(f"{mean(rows[i:i+10], 'reward/task'):.2f}" for i in range(0, len(rows), 10))
    print(f"| {d.name} | {mean(rows[:10], 'reward/task'):.3f} | {mean(rows[-10:], 'reward/task'):.3f} | {curve} "
          f"| {mean(rows, 'mismatch/k3'):.3f} | {mean(rows, 'mismatch/masked_low_frac'):.3f} / {mean(rows, 'mismatch/masked_high_frac'):.3f} "
          f"| {mean(rows, 'clip/low_frac'):.3f} / {mean(rows, 'clip/high_frac'):.3f} / {mean(rows, 'clip/delta_frac'):.4f} "
          f"| {mean(rows, 'grad_norm'):.2f} | {eval_reward(d / 'eval.txt')} |")
PY
