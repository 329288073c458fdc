#!/usr/bin/env python3
"""SFT data with a long-tailed completion length, for the C3PO++ experiment (docs/experiments.md).

Reads tasks from `trellis env sample` (JSONL) and writes {"prompt", "completion"} examples whose
completion is a scratchpad of a random length followed by the task's solution: the text's
characters spelled out again and again inside <think></think>. Most scratchpads are short, a
minority is long, so a model warm-started on them samples lengths with a long tail, the way
reasoning models do. The scratchpad does not change the reward: only the answer tag is scored.

    long_tail_sft_data.py TASKS.jsonl SYSTEM_PROMPT OUT.jsonl [LONG_FRACTION] [LONG_MAX]
"""
import json
import random
import sys

tasks_path, system_prompt, out_path = sys.argv[1:4]
long_fraction = float(sys.argv[4]) if len(sys.argv) > 4 else 0.15
long_max = int(sys.argv[5]) if len(sys.argv) > 5 else 200
rng = random.Random(0)
with open(tasks_path) as tasks, open(out_path, "w") as out:
    for line in tasks:
        task = json.loads(line)
        text = task["verification_info"]["text"]
        if rng.random() < long_fraction:
            n = rng.randint(long_max // 4, long_max)
        else:
            n = rng.randint(0, 8)
        scratch = (" ".join(text) + " ") * (n // (2 * len(text)) + 1)
        completion = f"<think>{scratch[:n]}</think>{task['solution']}"
        prompt = [{"role": "system", "content": system_prompt}, {"role": "user", "content": task["prompt"]}]
        out.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
