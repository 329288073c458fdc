#!/usr/bin/env python3
"""Hugging Face `transformers` as the peer of Trellis's GPU benchmarks (issue 22), on the same
model directory and in the same run:

    hf_peer.py shape DIR [--shape qwen2-0.5b]   random weights of a released model's shape in DIR
    hf_peer.py generate DIR --batch 64 --prompt-len 128 --max-tokens 128 [--device cuda]

`shape` rewrites DIR's config.json (made by `trellis model init --arch qwen2`, whose tokenizer it
keeps) with the shape's dimensions and saves random bf16 weights of that shape, so both programs
load the same files. `generate` times `model.generate` as `trellis bench generate` times its
engine: random prompts of prompt-len tokens, exactly max-tokens sampled tokens each (temperature
1, no top-k), after one untimed warm-up, and prints the generated tokens per second.

Needs python3 with torch and transformers (the GPU machines have them; the CI machine does not).
"""
import argparse
import json
import pathlib
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

SHAPES = {
    # Qwen/Qwen2-0.5B's config.json, the reference shape.
    "qwen2-0.5b": {
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
}


def make_shape(model_dir, shape):
    config_path = pathlib.Path(model_dir) / "config.json"
    config = json.loads(config_path.read_text())
    config.update(SHAPES[shape])
    config_path.write_text(json.dumps(config, indent=2))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir),
                                             dtype=torch.bfloat16)
    model.save_pretrained(model_dir, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"{model_dir}: {shape}, {params / 1e6:.0f}M parameters, bf16")


def generate(model_dir, batch, prompt_len, max_tokens, device):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    model = model.to(device).eval()
    vocab = model.config.vocab_size
    prompts = torch.randint(0, vocab, (batch, prompt_len), device=device)
    mask = torch.ones_like(prompts)
    kwargs = dict(attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                  max_new_tokens=max_tokens, min_new_tokens=max_tokens, pad_token_id=0)
    with torch.no_grad():
        model.generate(prompts, **{**kwargs, "max_new_tokens": 8, "min_new_tokens": 8})
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(prompts, **kwargs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    generated = (out.shape[1] - prompt_len) * batch
    print(f"hf generate: batch {batch}, prompt {prompt_len}, {generated} tokens in {seconds:.2f} s: "
          f"{generated / seconds:.1f} tok/s (transformers, bf16, {device})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("shape")
    s.add_argument("dir")
    s.add_argument("--shape", default="qwen2-0.5b", choices=sorted(SHAPES))
    g = sub.add_parser("generate")
    g.add_argument("dir")
    g.add_argument("--batch", type=int, default=64)
    g.add_argument("--prompt-len", type=int, default=128)
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.command == "shape":
        make_shape(args.dir, args.shape)
    else:
        generate(args.dir, args.batch, args.prompt_len, args.max_tokens, args.device)


if __name__ == "__main__":
    main()
