#!/usr/bin/env bash
# The decoupled-pipeline experiment of docs/experiments.md: the quickstart's config (async level 2)
# run twice from the same warm start and seeds — once by the single-process reference loop
# (`trellis rl`) and once distributed (`trellis run`: orchestrator, trainer and two workers as
# processes on loopback). Each run gets the machine alone. Prints the reward curves by 10-step
# window, staleness and trainer idle time, and writes the distributed run's report with the
# reference curve overlaid.
#
#   scripts/experiments/distributed.sh [OUT_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/distributed}
steps=${2:-60}
bin=${TRELLIS:-build/trellis}  # TRELLIS=/path/to/a/copy keeps a rebuild from changing it mid-run
config=(examples/quickstart.toml --set rl.steps="$steps" --set trainer.checkpoint_every=0)
mkdir -p "$out"
if [ ! -f "$out/warm/config.json" ]; then
  "$bin" model init --preset tiny --seed 0 --out "$out/base" >/dev/null
  "$bin" sft "${config[@]}" --set model.path="$out/base" --set sft.out="$out/warm" \
    --run-dir "$out/sft" > "$out/sft.log" 2>&1
fi
if [ ! -f "$out/reference/metrics.jsonl" ]; then
  start=$SECONDS
  "$bin" rl "${config[@]}" --set model.path="$out/warm" --run-dir "$out/reference" \
    > "$out/reference.log" 2>&1
  echo "$((SECONDS - start)) s" > "$out/reference.time"
fi
if [ ! -f "$out/distributed/report.html" ]; then
  start=$SECONDS
  "$bin" run "${config[@]}" --set model.path="$out/warm" --run-dir "$out/distributed" \
    > "$out/distributed.log" 2>&1
  echo "$((SECONDS - start)) s" > "$out/distributed.time"
fi
mkdir -p "$out/distributed/reference"
cp "$out/reference/metrics.jsonl" "$out/distributed/reference/metrics.jsonl"
"$bin" report "$out/distributed" >/dev/null
python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print("| run | wall time | reward by 10-step window | staleness mean (max) | trainer idle | s/step |")
print("|---|---|---|---|---|---|")
for name in ["reference", "distributed"]:
    rows = [json.loads(l) for l in open(out / name / "metrics.jsonl")]
    windows = [rows[i:i + 10] for i in range(0, len(rows), 10)]
    curve = " ".join(f"{sum(r['reward/mean'] for r in w) / len(w):.3f}" for w in windows)
    stale = sum(r["staleness/mean"] for r in rows) / len(rows)
    stale_max = max(r["staleness/max"] for r in rows)
    idle = [r["trainer/idle_frac"] for r in rows if "trainer/idle_frac" in r]
    idle_s = f"{100 * sum(idle) / len(idle):.0f}%" if idle else "—"
    step_s = sum(r["time/step"] for r in rows) / len(rows)
    wall = (out / f"{name}.time").read_text().strip() if (out / f"{name}.time").exists() else "?"
    print(f"| {name} | {wall} | {curve} | {stale:.2f} ({stale_max:.0f}) | {idle_s} | {step_s:.2f} |")
PY
echo "report: $out/distributed/report.html"
