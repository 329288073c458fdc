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
)toml";
}

}  // namespace trellis
