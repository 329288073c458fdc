#!/usr/bin/env bash
# The C3PO++ experiment of docs/experiments.md: plain vs partial-rollout workers on a task with a
# long-tailed completion length. The tiny model is warm-started on reverse_text examples whose
# answers follow a scratchpad of random length (mostly short, 15% long: see
# long_tail_sft_data.py), so it samples lengths with a long tail like a reasoning model. Then
# `trellis run` trains it twice from the same warm start and seeds, one worker each: plain
# (each file's groups generated to the end) and C3PO++ (infer.partial_rollouts). Each run gets
# the machine alone. Prints the warm start's length distribution, and per run the rollout-phase
# time per step (the worker's seconds in the engine and scoring), the decode batch the tail
# leaves, engine forwards and prefilled tokens per step, and the reward curve. Last, the rollout
# phase alone on the fixed warm start (`trellis bench rollouts`), free of the training run.
#
#   scripts/experiments/c3po.sh [OUT_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/c3po}
steps=${2:-40}
bin=${TRELLIS:-build/trellis}  # TRELLIS=/path/to/a/copy keeps a rebuild from changing it mid-run
system_prompt="Reverse the text. Answer inside <answer></answer>."  # examples/quickstart.toml's
config=(examples/quickstart.toml --set rl.steps="$steps" --set rl.max_tokens=320
        --set run.workers=1 --set trainer.checkpoint_every=0)
mkdir -p "$out"
if [ ! -f "$out/warm/config.json" ]; then
  "$bin" model init --preset tiny --seed 0 --out "$out/base" >/dev/null
  "$bin" env sample --env reverse_text --config examples/quickstart.toml --n 4000 --seed 100 \
    --out "$out/tasks.jsonl" >/dev/null
  python3 scripts/experiments/long_tail_sft_data.py "$out/tasks.jsonl" "$system_prompt" \
    "$out/sft.jsonl"
  "$bin" sft "${config[@]}" --set model.path="$out/base" --set sft.data="$out/sft.jsonl" \
    --set sft.steps=300 --set sft.eval_every=0 --set sft.out="$out/warm" \
    --run-dir "$out/sft" > "$out/sft.log" 2>&1
fi
if [ ! -f "$out/warm_lengths.jsonl" ]; then
  "$bin" eval --model "$out/warm" --config examples/quickstart.toml --n 64 --k 8 \
    --max-tokens 320 --seed 5 --out "$out/warm_lengths.jsonl" > "$out/warm_eval.log" 2>&1
fi
for mode in plain c3po; do
  [ -f "$out/$mode/report.html" ] && continue
  extra=()
  [ "$mode" = c3po ] && extra=(--set infer.partial_rollouts=true)
  start=$SECONDS
  "$bin" run "${config[@]}" --set model.path="$out/warm" "${extra[@]}" --run-dir "$out/$mode" \
    > "$out/$mode.log" 2>&1
  echo "$((SECONDS - start)) s" > "$out/$mode.time"
done
python3 - "$out" <<'PY'
import json, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
lengths = sorted(s["tokens"] for l in open(out / "warm_lengths.jsonl")
                 for s in json.loads(l)["samples"])
q = lambda p: lengths[min(len(lengths) - 1, int(p * len(lengths)))]
print(f"warm start, {len(lengths)} samples at T=1: mean {sum(lengths) / len(lengths):.1f} tokens, "
      f"p50 {q(.5)}, p90 {q(.9)}, p99 {q(.99)}, max {lengths[-1]} (max_tokens 320)\n")
print("| run | wall | rollout s/step | decode batch | forwards/step | prefilled/step | tokens/s "
      "| trainer idle | reward by 10-step window | length first→last 10 |")
print("|---|---|---|---|---|---|---|---|---|---|")
pattern = re.compile(r"(\d+) tokens, ([\d.]+) s generating, decode batch ([\d.]+), (\d+) prefilled")
for mode in ["plain", "c3po"]:
    rows = [json.loads(l) for l in open(out / mode / "metrics.jsonl")]
    files = [tuple(map(float, m.groups()))
             for m in pattern.finditer((out / mode / "logs" / "worker-0.log").read_text())]
    tokens = sum(f[0] for f in files)
    seconds = sum(f[1] for f in files)
    forwards = sum(f[0] / f[2] for f in files)
    prefilled = sum(f[3] for f in files)
    steps = len(rows)
    windows = [rows[i:i + 10] for i in range(0, steps, 10)]
    curve = " ".join(f"{sum(r['reward/mean'] for r in w) / len(w):.3f}" for w in windows)
    length = lambda w: sum(r["seq_len/mean"] for r in w) / len(w)
    idle = sum(r["trainer/idle_frac"] for r in rows[1:]) / (steps - 1)
    wall = (out / f"{mode}.time").read_text().strip()
    print(f"| {mode} | {wall} | {seconds / steps:.3f} | {tokens / forwards:.1f} "
          f"| {forwards / steps:.0f} | {prefilled / steps:.0f} | {tokens / seconds:.0f} "
          f"| {100 * idle:.0f}% | {curve} | {length(rows[:10]):.0f}→{length(rows[-10:]):.0f} |")
PY
echo
echo "The rollout phase alone (bench rollouts: the warm start held fixed, 1 thread):"
"$bin" bench rollouts --model "$out/warm" --config examples/quickstart.toml \
  --set rl.max_tokens=320 --steps 40 --threads 1 2>/dev/null
