// Flags shared by the commands that run a model: compute (--device, --dtype, --threads) and
// sampling (--temperature, --top-p, --top-k).
#include "cli/commands.h"
#include "common/logging.h"

namespace trellis::cli {

void add_compute_flags(CLI::App* cmd, ComputeFlags& flags) {
  cmd->add_option("--device", flags.device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--dtype", flags.dtype, "compute dtype: auto | bf16 | fp32")
      ->capture_default_str();
  cmd->add_option("--threads", flags.threads, "CPU threads for tensor math (0 = every core)")
      ->capture_default_str();
}

void add_sampling_flags(CLI::App* cmd, engine::SamplingParams& sampling) {
  cmd->add_option("--temperature", sampling.temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--top-p", sampling.top_p, "nucleus sampling mass (1 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", sampling.top_k, "sample among the k most likely tokens (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
}

model::Compute setup_compute(const ComputeFlags& flags) {
  model::init_compute_runtime(flags.threads);
  model::Compute c = model::resolve_compute(flags.device, flags.dtype);
  log::debug("compute: {} with {} threads", c.describe(), torch::get_num_threads());
  return c;
}

}  // namespace trellis::cli
