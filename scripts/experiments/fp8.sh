#!/usr/bin/env bash
# The FP8 precision-flow experiment of docs/experiments.md (Jet-RL, docs/fp8.md): a tiny model
# warm-started with `trellis sft` on reverse_text, then `trellis rl` under each rl.precision (bf16,
# fp8-rollout, fp8) and each mismatch correction (none, TIS, IcePop), over the same steps. Prints
# one summary row per run (python3 reads metrics.jsonl): the mismatch at step 0 (the precision
# alone: no update has happened yet), the mean mismatch, the reward, and each final policy on the
# fixed evaluation set of the RL section.
#
#   scripts/experiments/fp8.sh [OUT_DIR] [STEPS]
#   THREADS=1 to leave a core to other work; MODES="fp8" or CORRECTIONS="none" for a part of the
#   grid (two such parts can run at once into the same OUT_DIR, then a last call prints them all).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/fp8}
steps=${2:-20}
bin=build/trellis
mkdir -p "$out"
config=(examples/reverse_text.toml --set compute.threads="${THREADS:-2}" --set sft.eval_tasks=0
  --set trainer.checkpoint_every=0)
if [ ! -f "$out/warm/config.json" ]; then
  "$bin" model init --preset tiny --seed 1 --out "$out/base" >/dev/null
  "$bin" sft "${config[@]}" --set model.path="$out/base" --set sft.out="$out/warm" --run-dir "$out/sft"
fi
for mode in ${MODES:-bf16 fp8-rollout fp8}; do
  for mismatch in ${CORRECTIONS:-none tis icepop}; do
    name="$mode-$mismatch"
    [ -f "$out/$name/metrics.jsonl" ] && [ "$(wc -l < "$out/$name/metrics.jsonl")" -ge "$steps" ] &&
      continue
    echo "fp8.sh: $name" >&2
    "$bin" rl "${config[@]}" --set model.path="$out/warm" --set rl.steps="$steps" \
      --set rl.precision="$mode" --set loss.mismatch="$mismatch" \
      --run-dir "$out/$name" > "$out/$name.log" 2>&1
    # The final policy on the fixed set (the engine in bf16: the weights are what is compared).
    "$bin" eval --model "$out/$name/checkpoints/step_$steps" --config examples/reverse_text.toml \
      --n 100 --k 8 --max-tokens 32 --seed 991 --threads "${THREADS:-2}" > "$out/$name/eval.txt" 2>&1
  done
done
python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
def mean(rows, key): return sum(r.get(key) or 0 for r in rows) / max(1, len(rows))
def eval_reward(path):
    if path.exists():
        for line in open(path):
            if line.startswith("reward "): return line.split()[1]
    return "?"
print("| run | mismatch/k3 step 0 | mismatch/k3 mean | masked low/high | reward first 5 | reward last 5 | trainer s/step | eval set, T = 1 |")
print("|---|---|---|---|---|---|---|---|")
order = {m: i for i, m in enumerate(["bf16", "fp8-rollout", "fp8"])}
runs = [p for p in out.iterdir() if (p / "metrics.jsonl").exists() and p.name.rsplit("-", 1)[0] in order]
for d in sorted(runs, key=lambda p: (order[p.name.rsplit("-", 1)[0]], p.name)):
    rows = [json.loads(l) for l in open(d / "metrics.jsonl")]
    trained = [r for r in rows if "mismatch/k3" in r]
    print(f"| {d.name} | {trained[0]['mismatch/k3']:.1e} | {mean(trained, 'mismatch/k3'):.4f} "
          f"| {mean(trained, 'mismatch/masked_low_frac'):.3f} / {mean(trained, 'mismatch/masked_high_frac'):.3f} "
          f"| {mean(rows[:5], 'reward/task'):.3f} | {mean(rows[-5:], 'reward/task'):.3f} "
          f"| {mean(trained, 'time/train'):.1f} | {eval_reward(d / 'eval.txt')} |")
PY
