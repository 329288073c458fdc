#!/usr/bin/env python3
"""Trellis's log-probs against Hugging Face `transformers`, an independent forward, on tiny random
models of each architecture with each supported rope_scaling (and plain RoPE).

For every case: `trellis model init` makes a model directory, its config.json gets the case's
rope_scaling, `trellis generate` samples completions of random prompts (fp32) and reports each
sampled token's log-prob, and transformers scores the same prompt + completion ids. Prints the
largest difference per case; exits 1 if one exceeds --tolerance.

Needs python3 with torch and transformers (the GPU machines have them; the CI machine does not):
    scripts/check_hf_logprobs.py build/trellis [--device cuda] [--keep DIR]
"""
import argparse
import json
import pathlib
import random
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM

CASES = [
    ("llama", None),
    ("llama", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    ("llama", {"rope_type": "linear", "factor": 4.0}),
    ("qwen2", {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
    ("qwen3", {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 64,
               "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}),
    ("qwen3", {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.5,
               "original_max_position_embeddings": 64}),
]


def tokenizer_size(model_dir):
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1


def check(trellis, arch, scaling, work, device, prompts, max_tokens):
    model_dir = work / "model"
    subprocess.run([trellis, "model", "init", "--arch", arch, "--preset", "tiny", "--out",
                    str(model_dir)], check=True, stdout=subprocess.DEVNULL)
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["rope_scaling"] = scaling
    config_path.write_text(json.dumps(config, indent=2))

    rng = random.Random(0)
    vocab = tokenizer_size(model_dir)
    lines = [{"prompt_token_ids": [rng.randrange(vocab) for _ in range(rng.randint(8, 200))]}
             for _ in range(prompts)]
    (work / "prompts.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    subprocess.run([trellis, "generate", "--model", str(model_dir), "--input",
                    str(work / "prompts.jsonl"), "--output", str(work / "out.jsonl"),
                    "--max-tokens", str(max_tokens), "--temperature", "1", "--dtype", "fp32",
                    "--device", device], check=True, stderr=subprocess.DEVNULL)
    results = [json.loads(l) for l in (work / "out.jsonl").read_text().splitlines()]

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    hf.eval()
    worst = 0.0
    with torch.no_grad():
        for line, result in zip(lines, results):
            prompt = line["prompt_token_ids"]
            for completion in result["completions"]:
                ids = prompt + completion["token_ids"]
                logits = hf(torch.tensor([ids], device=device)).logits[0, :, :vocab]
                logp = torch.log_softmax(logits.double(), -1)
                for j, (token, theirs) in enumerate(zip(completion["token_ids"],
                                                        completion["logprobs"])):
                    ours = logp[len(prompt) - 1 + j, token].item()
                    worst = max(worst, abs(ours - theirs))
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trellis", help="the trellis binary")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--keep", help="directory for the cases' files (default: a temporary one)")
    args = parser.parse_args()

    root = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="trellis-hf-"))
    failed = False
    for i, (arch, scaling) in enumerate(CASES):
        work = root / f"case{i}"
        work.mkdir(parents=True, exist_ok=True)
        worst = check(args.trellis, arch, scaling, work, args.device, args.prompts,
                      args.max_tokens)
        ok = worst <= args.tolerance
        failed |= not ok
        kind = "plain" if scaling is None else scaling.get("rope_type", scaling.get("type"))
        print(f"{arch:6} {kind:7} {json.dumps(scaling) if scaling else '':100.100} "
              f"max |logprob diff| {worst:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
