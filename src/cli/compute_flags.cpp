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

model::Compute setup_compute(const ComputeFlags& flags) {
  model::init_compute_runtime(flags.threads);
  model::Compute c = model::resolve_compute(flags.device, flags.dtype);
  log::debug("compute: {} with {} threads", c.describe(), torch::get_num_threads());
  return c;
}

}  // namespace trellis::cli
