// The trainer's ranks from the command line (`trellis rl` and `trellis trainer`): --nproc starts
// this machine's other ranks as copies of this very command (with trainer.local_rank set), and
// --nnodes / --node-rank / --rdzv join ranks on other machines (rl/process_group.h).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "rl/process_group.h"
#include "run/child_process.h"

namespace trellis::cli {

// --nproc, --nnodes, --node-rank, --rdzv: each overrides its trainer.* key.
struct RankOverrides {
  int nproc = -1, nnodes = -1, node_rank = -1;  // -1 = not given
  std::string rdzv;                             // "" = not given
  void add_to(CLI::App* cmd);
  void apply(std::vector<std::string>& overrides) const;
};

// True for every rank but rank 0 (which runs the loop and owns the run directory).
bool is_follower(const Config& config);

// `config` with compute.threads = 0 (every core) shared out among this machine's ranks.
Config with_rank_threads(Config config);

class TrainerRanks {
 public:
  // Joins the trainer's ranks; a machine's local rank 0 first starts the machine's other ranks,
  // each logging to `log_dir`/rank-<r>.log.
  TrainerRanks(const Config& config, const std::filesystem::path& log_dir);
  ~TrainerRanks();  // stops local ranks still running

  rl::ProcessGroup& group() { return *group_; }

  // Runs this rank's part. A failure is reported to the other ranks before it propagates; on
  // success, waits for the local ranks started here to finish, and fails if one did.
  void run(const std::function<void()>& body);

 private:
  rl::DistributedOptions options_;
  std::vector<std::unique_ptr<run::ChildProcess>> children_;
  std::unique_ptr<rl::ProcessGroup> group_;
};

}  // namespace trellis::cli
