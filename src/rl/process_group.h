// ProcessGroup: the trainer's ranks and the collectives between them, all from libtorch's c10d
// (Gloo over a TCPStore rendezvous; DESIGN.md: never a collective of our own).
//
// A trainer of N ranks runs `nproc` processes on each of `nnodes` machines; rank 0 (machine 0,
// local rank 0) is the leader: it alone talks to the orchestrator and the run directory, and
// tells the others what to do (rl/trainer_ranks.h). The ranks meet through a store: on one
// machine a FileStore in a private directory (no port for strangers to reach), across machines
// rank 0's TCPStore at rdzv_host:rdzv_port, which like any c10d store has no authentication and
// belongs on a private network. A world of one rank needs no rendezvous: every collective is the
// identity.
//
// Failures: a rank that fails stores its error in the rendezvous store before it exits; the others
// see the broken collective (Gloo reports a closed peer at once) and fail with that rank's error.
// A collective that waits longer than timeout_s for a live but stuck peer fails the same way. A
// rank that never joins (a machine not started, a wrong --rdzv) fails the others after
// rendezvous_timeout_s, with the ranks that are missing named.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <torch/torch.h>

namespace trellis {
class Config;
}

namespace trellis::rl {

struct DistributedOptions {
  int nproc = 1;      // ranks on this machine
  int nnodes = 1;     // machines
  int node_rank = 0;  // this machine's index
  int local_rank = 0;
  std::string rdzv_host = "127.0.0.1";  // where rank 0's TCPStore listens
  int rdzv_port = 0;
  std::string store_file;  // a FileStore instead (ranks on one machine)
  double timeout_s = 900;  // the longest one collective waits for a peer
  // The longest the ranks wait for each other to join (a machine started late, or never): the
  // ranks missing then are named.
  double rendezvous_timeout_s = 300;

  int world() const { return nproc * nnodes; }
  int rank() const { return node_rank * nproc + local_rank; }

  // trainer.nproc, nnodes, node_rank, local_rank, rdzv ("HOST:PORT", "file:PATH" on one machine, ""
  // = chosen by the launcher), collective_timeout_s and rendezvous_timeout_s; Error naming the key
  // when a value is unusable.
  static DistributedOptions from_config(const Config& config);
};

class ProcessGroup {
 public:
  // One rank: no store, no peers.
  ProcessGroup();
  // Joins the rendezvous (rank 0 creates a TCPStore) and builds the Gloo group over it, which
  // waits for every rank.
  explicit ProcessGroup(const DistributedOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  bool leader() const { return rank_ == 0; }

  // Collectives, in place on contiguous tensors (one off the CPU goes through a host copy, as
  // Gloo moves host memory); every rank calls each, in the same order.
  void all_reduce_sum(torch::Tensor& t);
  // `flat` holds world() equal chunks; returns this rank's chunk of their sum over the ranks.
  torch::Tensor reduce_scatter_sum(const torch::Tensor& flat);
  // Fills `flat` (world() chunks of shard's size) with every rank's shard, in rank order.
  void all_gather(const torch::Tensor& shard, torch::Tensor& flat);
  void broadcast(torch::Tensor& t, int root);
  void send(const torch::Tensor& t, int to);
  void recv(torch::Tensor& t, int from);

  // The leader's message to every rank (its `message` argument is ignored elsewhere). Followers
  // wait for it without a time limit (the leader may wait for rollouts for hours), polling the
  // store for the leader's signal and for a rank's failure.
  std::string broadcast_from_leader(const std::string& message);

  // Stores `what` as this rank's failure for the others to report (never throws).
  void report_failure(const std::string& what) noexcept;

  // Seconds spent inside collectives so far (waiting for peers included).
  double comm_seconds() const { return comm_seconds_; }

 private:
  struct Impl;
  // Waits for `work`-like completion inside `fn`, adding its time to comm_seconds_ and turning a
  // broken collective into an Error that names the rank that failed, if one said so.
  template <typename Fn>
  void collective(const char* what, Fn&& fn);
  [[noreturn]] void peer_failed(const char* what, const std::string& detail);
  // Says in the store that this rank has joined and waits until every rank has; Error at `where`
  // naming the ranks still missing after `timeout`.
  void wait_for_every_rank(std::chrono::milliseconds timeout, const std::string& where);

  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
  int64_t messages_ = 0;  // broadcast_from_leader calls so far
  double comm_seconds_ = 0;
};

}  // namespace trellis::rl
