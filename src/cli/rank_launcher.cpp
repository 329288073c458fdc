#include "cli/rank_launcher.h"

#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/files.h"
#include "common/logging.h"
#include "rl/trainer_ranks.h"
#include "run/child_process.h"

namespace trellis::cli {
namespace fs = std::filesystem;
namespace {

// This process's command line, to start the other ranks with.
std::vector<std::string> own_argv() {
  const std::string raw = read_file("/proc/self/cmdline");
  std::vector<std::string> argv;
  size_t start = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\0') {
      argv.push_back(raw.substr(start, i - start));
      start = i + 1;
    }
  }
  if (!argv.empty()) argv[0] = self_binary().string();
  return argv;
}

// This process's place among the trainer's ranks.
class TrainerRanks {
 public:
  // Joins the trainer's ranks; a machine's local rank 0 first starts the machine's other ranks,
  // each logging to `log_dir`/rank-<r>.log.
  TrainerRanks(rl::DistributedOptions options, const Config& config, const fs::path& log_dir);
  ~TrainerRanks();  // stops local ranks still running

  rl::ProcessGroup& group() { return *group_; }

  // Runs this rank's part. A failure is reported to the other ranks before it propagates; on
  // success, waits for the local ranks started here to finish, and fails if one did.
  void run(const std::function<void()>& body);

 private:
  rl::DistributedOptions options_;
  std::vector<std::unique_ptr<run::ChildProcess>> children_;
  std::unique_ptr<rl::ProcessGroup> group_;
  fs::path store_dir_;  // the FileStore's directory, made here
};

// `config` with compute.threads = 0 (every core) shared out among this machine's `nproc` ranks.
Config with_rank_threads(Config config, int nproc) {
  if (nproc > 1 && config.get<int64_t>("compute.threads") == 0) {
    const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
    config.apply_override("compute.threads=" + std::to_string(std::max<int64_t>(1, cores / nproc)));
  }
  return config;
}

TrainerRanks::TrainerRanks(rl::DistributedOptions options, const Config& config,
                           const fs::path& log_dir)
    : options_(std::move(options)) {
  if (options_.world() == 1) {
    group_ = std::make_unique<rl::ProcessGroup>();
    return;
  }
  if (config.get<std::string>("compute.device") == "cuda") {
    fail("trainer.nproc",
         "several ranks on CUDA need NCCL, which this build does not have yet: "
         "run one rank per GPU machine, or train on CPU");
  }
  if (options_.local_rank == 0) {
    if (options_.nnodes == 1 && options_.store_file.empty() && options_.rdzv_port == 0) {
      // One machine: the ranks meet in a FileStore only this user can open.
      std::string dir = (fs::temp_directory_path() / "trellis-ranks-XXXXXX").string();
      if (!::mkdtemp(dir.data())) fail(dir, "cannot create the ranks' store directory");
      store_dir_ = dir;
      options_.store_file = (store_dir_ / "store").string();
    }
    const std::string rdzv = options_.store_file.empty()
                                 ? options_.rdzv_host + ":" + std::to_string(options_.rdzv_port)
                                 : "file:" + options_.store_file;
    const auto argv = own_argv();
    for (int i = 1; i < options_.nproc; ++i) {
      const int rank = options_.node_rank * options_.nproc + i;
      auto child_argv = argv;
      for (const std::string& set : {"trainer.local_rank=" + std::to_string(i),
                                     Config::string_override("trainer.rdzv", rdzv)}) {
        child_argv.push_back("--set");
        child_argv.push_back(set);
      }
      auto child =
          std::make_unique<run::ChildProcess>("rank " + std::to_string(rank), child_argv,
                                              log_dir / ("rank-" + std::to_string(rank) + ".log"));
      child->start();
      children_.push_back(std::move(child));
    }
    if (options_.nproc > 1) {
      log::info("started ranks {}..{} of {} (logs in {}/rank-N.log)",
                options_.node_rank * options_.nproc + 1,
                options_.node_rank * options_.nproc + options_.nproc - 1, options_.world(),
                log_dir.string());
    }
  }
  group_ = std::make_unique<rl::ProcessGroup>(options_);
}

TrainerRanks::~TrainerRanks() {
  for (auto& child : children_) {
    if (child->running()) child->stop(5);
  }
  group_.reset();
  std::error_code ec;
  if (!store_dir_.empty()) fs::remove_all(store_dir_, ec);
}

void TrainerRanks::run(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    group_->report_failure(message_of(e));
    throw;
  }
  // The followers return once rank 0 has said stop; give them a moment to exit.
  for (auto& child : children_) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (child->running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int status = child->running() ? child->stop(5) : *child->poll();
    if (status != 0) {
      fail(child->name(), "exited with status {}:\n{}", status, child->log_tail(20));
    }
  }
}

}  // namespace

void run_as_trainer_rank(const RunFlags& flags, const RankOverrides& ranks,
                         const std::function<fs::path(const Config&)>& run_dir_of,
                         const LeadFn& lead) {
  RunFlags with_ranks = flags;
  ranks.apply(with_ranks.overrides);
  Config resolved = with_ranks.resolve();
  const auto options = rl::DistributedOptions::from_config(resolved);
  const Config config = with_rank_threads(std::move(resolved), options.nproc);
  const model::Compute compute = setup_compute(config);
  if (options.rank() != 0) {  // a rank started by rank 0 (--nproc), or on another machine
    TrainerRanks follower(options, config, fs::current_path());
    follower.run([&] { rl::run_follower(config, compute, follower.group()); });
    return;
  }
  const fs::path run_dir = run_dir_of(config);
  TrainerRanks leader(options, config, run_dir);
  leader.run([&] { lead(config, compute, run_dir, leader.group()); });
}

void RankOverrides::add_to(CLI::App* cmd) {
  cmd->add_option("--nproc", nproc, "trainer ranks on this machine (overrides trainer.nproc)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--nnodes", nnodes, "machines the trainer's ranks run on (trainer.nnodes)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--node-rank", node_rank,
                  "this machine's index, 0 = rank 0's (trainer.node_rank)")
      ->check(CLI::Range(0, 4095));
  cmd->add_option("--rdzv", rdzv, "HOST:PORT of rank 0's rendezvous store (trainer.rdzv)");
}

void RankOverrides::apply(std::vector<std::string>& overrides) const {
  if (nproc >= 0) overrides.push_back("trainer.nproc=" + std::to_string(nproc));
  if (nnodes >= 0) overrides.push_back("trainer.nnodes=" + std::to_string(nnodes));
  if (node_rank >= 0) overrides.push_back("trainer.node_rank=" + std::to_string(node_rank));
  if (!rdzv.empty()) overrides.push_back(Config::string_override("trainer.rdzv", rdzv));
}

}  // namespace trellis::cli
