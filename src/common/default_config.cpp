// The embedded defaults: every configurable key, with a value that works and a comment saying
// what it does. docs/configuration.md is generated from the same text by `trellis config show`.
#include "common/config.h"

namespace trellis {

std::string_view default_config_toml() {
  return R"toml(
[run]
name = "trellis"        # run name; the run directory is runs/<name>-<UTC timestamp>/
dir = ""                # explicit run directory (overrides the default above)
seed = 0                # master seed for initialisation and sampling

[compute]
device = "cpu"          # cpu | cuda
dtype = "auto"          # auto | bf16 | fp32: compute dtype; auto = bf16 where the hardware has it
threads = 0             # CPU threads for tensor math; 0 = every core

[log]
level = "info"          # trace | debug | info | warn | error

[model]
path = ""               # Hugging Face model directory (config.json, *.safetensors, tokenizer.json)

[env]
name = "math"           # environment (`trellis env list`): math | code | countdown | arithmetic | ...
tasks = ""              # JSONL dataset of tasks; "" = tasks from the environment's generator
difficulty = 3          # generator difficulty, 1 (easiest) .. 10
system_prompt = ""      # "" = the environment's own (each has one that states the answer format)

[env.length]            # L1-style length reward: R = R_task - alpha * |T - length|
targets = []            # token targets T, one drawn per prompt, e.g. [512, 1024, 2048]; [] = off
alpha = 0.0003          # penalty per token of distance from the target

[env.code]              # the sandbox that runs model-written Python (bubblewrap + rlimits)
python = "/usr/bin/python3"  # interpreter inside the sandbox
cpu_seconds = 5         # CPU time per test run
wall_seconds = 10       # wall-clock time per test run (catches sleeping and blocked programs)
memory_mib = 512        # address space per process
max_processes = 16      # processes/threads the program may have at once (fork bombs)
max_output_kib = 1024   # stdout + stderr kept per run; a program that prints more fails
)toml";
}

}  // namespace trellis
