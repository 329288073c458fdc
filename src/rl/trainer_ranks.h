// The trainer's ranks at work (rl/process_group.h): rank 0, the leader, runs the loop (`trellis
// rl`'s or `trellis trainer`'s) and tells the other ranks, the followers, what to do next: load a
// checkpoint's optimizer state, train a step on this batch, save a checkpoint, stop. Every rank
// then does it together (rl/trainer.h, rl/optimizer.h). A single rank sends nothing.
#pragma once

#include <filesystem>
#include <functional>
#include <vector>

#include "common/config.h"
#include "model/compute.h"
#include "model/transformer.h"
#include "rl/metrics_log.h"
#include "rl/process_group.h"
#include "rl/rollouts.h"
#include "rl/trainer.h"

namespace trellis::rl {

class RankLeader {
 public:
  RankLeader(ProcessGroup& group, Trainer& trainer) : group_(group), trainer_(trainer) {}

  // Loads the optimizer state of `checkpoint` on every rank; returns its progress.json.
  Json resume(const std::filesystem::path& checkpoint);
  Metrics step(const std::vector<Rollout>& batch);
  // Every rank's optimizer state goes into the checkpoint `save` writes (rl::save_checkpoint).
  std::filesystem::path checkpoint(const std::function<std::filesystem::path()>& save);
  // The followers return from run_follower. Not called on an error: the followers learn of it
  // from the broken group (a leader that fails mid-step cannot send anything).
  void stop();

 private:
  void send(const Json& message);

  ProcessGroup& group_;
  Trainer& trainer_;
};

// A follower's whole life: loads the model of `config` as rank 0 does, then trains what rank 0
// sends until it says stop.
void run_follower(const Config& config, const model::Compute& compute, ProcessGroup& group);

}  // namespace trellis::rl
