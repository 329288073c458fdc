// RolloutCollector: prompt groups in flight on the rollout engine, scored as their completions
// finish. The caller adds groups, drives the engine (step(), run(token_budget),
// update_weights()) and takes the groups whose every completion has ended and been scored.
//
// generate_rollouts() adds a batch and runs it to the end; a C3PO++ worker (specs/rl.md §6) keeps
// the engine topped up with new groups, runs it by a token budget and takes whatever completed,
// while unfinished completions carry over to the next policy version. When the engine purges a
// completion (max_retention) the collector aborts its siblings, so the group ends soon; the caller
// sees it with finish "purged"/"abort" rollouts (reward 0, not scored) and drops it.
//
// Callbacks run on the engine's thread; scoring runs on worker threads because the code
// environment's sandbox takes tens of milliseconds per test. Call everything from one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/worker_pool.h"
#include "engine/engine.h"
#include "env/environment.h"
#include "model/prompting.h"
#include "rl/rollouts.h"

namespace trellis::rl {

class RolloutCollector {
 public:
  // options.seed and on_progress are unused here: add() takes each group's seed.
  RolloutCollector(engine::Engine& engine, const model::Prompting& prompting,
                   const env::Environment& environment, RolloutOptions options);
  ~RolloutCollector();  // aborts what is still in flight
  RolloutCollector(const RolloutCollector&) = delete;
  RolloutCollector& operator=(const RolloutCollector&) = delete;

  // Adds G = options.group_size completions of `task`; completion j samples with seed + j and
  // the group's length target is drawn from `seed`. `id` names the group in what take() returns
  // (RolloutGroup::task_index) and must be unique among the groups in flight.
  void add(const env::Task& task, int64_t id, uint64_t seed);

  // Groups whose completions have all ended and been scored, in the order they completed. With
  // `wait`, first waits for the scoring of every completion the engine has finished.
  std::vector<RolloutGroup> take(bool wait = false);

  // Aborts the groups still running that hold a token sampled by a policy version older than
  // `version`; they come back from take() with "abort" rollouts. Returns their ids.
  std::vector<int64_t> abort_older_than(int64_t version);

  // Completions added that the engine has not finished: what a C3PO++ pool holds at Ω. (A group's
  // finished completions wait for their siblings outside it.)
  int64_t in_flight() const;
  // Completions the engine has finished whose scoring is still pending.
  int64_t scoring() { return scorers_.pending(); }

 private:
  struct Group;
  void on_finish(Group& group, engine::Completion c);
  void abort_broken();  // outside engine calls: abort() must not run inside a callback

  engine::Engine& engine_;
  const model::Prompting& prompting_;
  const env::Environment& environment_;
  RolloutOptions options_;
  std::vector<int32_t> stop_ids_;
  double temperature_ = 1.0;
  std::map<int64_t, std::unique_ptr<Group>> groups_;  // by id
  mutable std::mutex mu_;                             // the fields below, shared with scorers
  std::vector<int64_t> complete_;                     // ids of whole groups, in completion order
  std::vector<int64_t> broken_;                       // ids of groups with a purged completion
  WorkerPool scorers_{0};  // last: its threads stop before the groups they write go away
};

}  // namespace trellis::rl
