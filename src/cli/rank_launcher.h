// The trainer's ranks from the command line (`trellis rl` and `trellis trainer`): --nproc starts
// this machine's other ranks as copies of this very command (with trainer.local_rank set), and
// --nnodes / --node-rank / --rdzv join ranks on other machines (rl/process_group.h).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/run_flags.h"
#include "common/config.h"
#include "model/compute.h"
#include "rl/process_group.h"

namespace trellis::cli {

// --nproc, --nnodes, --node-rank, --rdzv: each overrides its trainer.* key.
struct RankOverrides {
  int nproc = -1, nnodes = -1, node_rank = -1;  // -1 = not given
  std::string rdzv;                             // "" = not given
  void add_to(CLI::App* cmd);
  void apply(std::vector<std::string>& overrides) const;
};

// A trainer command's body on this rank: resolves `flags` with `ranks`, sets up compute (threads
// shared out among the machine's ranks when compute.threads is 0) and joins the ranks. Rank 0
// then makes its run directory with `run_dir_of` and runs `lead`; every other rank follows it
// (rl::run_follower). A failure is reported to the other ranks before it propagates.
using LeadFn = std::function<void(const Config& config, const model::Compute& compute,
                                  const std::filesystem::path& run_dir, rl::ProcessGroup& group)>;
void run_as_trainer_rank(const RunFlags& flags, const RankOverrides& ranks,
                         const std::function<std::filesystem::path(const Config&)>& run_dir_of,
                         const LeadFn& lead);

}  // namespace trellis::cli
