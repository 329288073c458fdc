#include "pipeline/inference_worker.h"

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/identity.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "env/registry.h"
#include "model/checkpoint.h"
#include "model/prompting.h"
#include "orchestrator/client.h"
#include "pipeline/fixed_data_sampler.h"
#include "pipeline/partial_rollouts.h"
#include "pipeline/policy_fetcher.h"
#include "pipeline/rollout_rows.h"
#include "rl/advantages.h"
#include "rl/rl_loop.h"
#include "rl/rollouts.h"
#include "rl/task_source.h"
#include "rollout/data_sampling.h"
#include "rollout/rollout_file.h"
#include "rollout/signing.h"
#include "toploc/proof_builder.h"

namespace trellis::pipeline {
namespace fs = std::filesystem;
namespace {

class Worker {
 public:
  Worker(const Config& config, const fs::path& run_dir, const model::Compute& compute,
         const std::atomic<bool>& stop)
      : config_(config),
        compute_(compute),
        stop_(stop),
        rl_(rl::RlLoopConfig::from_config(config)),
        client_(orchestrator::client_url(config)) {
    name_ = config.get<std::string>("infer.name");
    fs::path key_file = config.get<std::string>("infer.key_file");
    if (key_file.empty()) key_file = run_dir / "keys" / (name_ + ".key");
    identity_ = std::make_unique<Identity>(Identity::load_or_create(key_file));
    groups_per_submission_ = config.get_at_least<int64_t>("infer.groups_per_submission", 1);
    poll_s_ = config.get_at_least<double>("infer.poll_s", 0.01);
    partial_ = config.get<bool>("infer.partial_rollouts");
    partial_options_ = PartialRolloutOptions::from_config(config);
    environment_ = env::make_environment(config);
    // Every worker and validator must see the same task list: the run's task seed.
    tasks_ = std::make_unique<rl::TaskSource>(*environment_, config, rl_.seed);
    sampler_ = std::make_unique<FixedDataSampler>(*tasks_, identity_->address(), config);
    rollout_ = rl::rollout_options(rl_, config);
    if (config.get<bool>("toploc.proofs")) rollout_.proofs = &proofs_;
    base_model_ = config.get<std::string>("model.path");
    if (base_model_.empty())
      fail("model.path", "no model: set [model] path (the tokenizer and architecture)");
    fetcher_ = std::make_unique<PolicyFetcher>(config, run_dir / "policies" / name_, base_model_,
                                               *identity_, stop);
    log::info(
        "worker {} ({}), orchestrator {}, policies from relays {}", name_, identity_->address(),
        client_.base_url(),
        fmt::format("{}", fmt::join(config.get_list<std::string>("shardcast.relay_urls"), ", ")));
    if (partial_) {
      log::info(
          "C3PO++ partial rollouts: {} completions in flight, {} tokens per iteration, "
          "retention {} versions",
          partial_options_.inflight, partial_options_.token_budget, partial_options_.max_retention);
    }
  }

  void run() {
    double last_warning = -1e9;
    while (!stop_) {
      orchestrator::Status status;
      try {
        status = client_.status();
      } catch (const Error& e) {
        if (monotonic_seconds() - last_warning > 10) {
          log::warn("orchestrator unreachable, retrying: {}", e.what());
          last_warning = monotonic_seconds();
        }
        sleep();
        continue;
      }
      if (status.done) {
        log::info("the run is done (policy version {}); exiting", status.policy_version);
        return;
      }
      run_id_ = status.run_id;
      // Work is handed out for the policy version a worker holds: hold one first.
      load_newest();
      if (!engine_ || (!work_ && !ask_for_work())) {
        sleep();
        continue;
      }
      if (!hold_policy(work_->step - rl_.async_level)) {
        sleep();
        continue;
      }
      if (partial_) {
        iterate_partial();
      } else {
        generate_plain();
      }
    }
  }

 private:
  void sleep() { std::this_thread::sleep_for(std::chrono::duration<double>(poll_s_)); }

  // Loads the newest verified version the fetcher holds, if newer than the one held (it is at
  // most the orchestrator's announced version).
  void load_newest() {
    if (const auto newer = fetcher_->newer_than(version_)) {
      try {
        load_policy(newer->first, newer->second);
        fetcher_->release_older_than(version_);
      } catch (const std::exception& e) {
        log::warn("could not load policy version {}: {}", newer->first, message_of(e));
      }
    }
  }

  // load_newest(); true when the held version is at least `min_version` (the time until then
  // counts as waiting for weights).
  bool hold_policy(int64_t min_version) {
    const double t0 = monotonic_seconds();
    load_newest();
    const bool ok = engine_ && version_ >= min_version;
    if (!ok) waited_for_weights_ += monotonic_seconds() - t0 + poll_s_;
    return ok;
  }

  void load_policy(int64_t version, const fs::path& dir) {
    auto loaded = model::load_transformer(dir, compute_);
    if (!engine_) {
      model_ = std::move(loaded);
      prompting_ =
          std::make_unique<model::Prompting>(model::Prompting::load(base_model_, model_->config()));
      engine_ = std::make_unique<engine::Engine>(
          *model_, worker_engine_options(config_, partial_, prompting_->tok.vocab_size()));
      if (rollout_.proofs) rl::feed_proofs(*engine_, proofs_);
      engine_->update_weights([](model::Transformer&) {}, version);
      if (partial_) {
        pool_ = std::make_unique<PartialRolloutPool>(*engine_, *prompting_, *environment_,
                                                     *sampler_, rollout_, partial_options_);
      }
    } else {
      engine_->update_weights([&](model::Transformer& m) { m.copy_weights_from(*loaded); },
                              version);
    }
    version_ = version;
    log::info("holding policy version {}", version);
  }

  // Asks the orchestrator what to generate next (admission control); false while it says wait.
  bool ask_for_work() {
    const double t0 = monotonic_seconds();
    orchestrator::WorkAnswer answer;
    try {
      answer = client_.request_work(*identity_, version_, groups_per_submission_);
    } catch (const Error& e) {
      log::warn("{}", e.what());
    }
    if (answer.wait_reason != wait_reason_ && !answer.wait_reason.empty())
      log::debug("waiting: {}", answer.wait_reason);
    wait_reason_ = answer.wait_reason;
    work_ = answer.work;
    if (!work_) waited_for_work_ += monotonic_seconds() - t0 + poll_s_;
    return work_.has_value();
  }

  // Plain mode: the assignment's groups, drawn for (step, submission), generated to the end.
  void generate_plain() {
    const orchestrator::Assignment w = *work_;
    auto tasks = sampler_->draw(w.step, w.submission, w.groups);
    auto o = rollout_;
    o.seed = sampler_->seed(w.step, w.submission);
    const double t0 = monotonic_seconds();
    auto groups = rl::generate_rollouts(*engine_, *prompting_, *environment_, tasks, o);
    generating_s_ += monotonic_seconds() - t0;
    submit(w, std::move(groups), std::move(tasks));
    work_.reset();
  }

  // C3PO++ mode: one pool iteration, unless whole groups for the assignment wait in ready_
  // already; a file takes the assignment's groups. A group holding a token older than step −
  // async_level can never be accepted: the pool aborts it in flight, and a finished one is
  // dropped from ready_. Groups of a file whose step filled before it came go back to ready_ for
  // the next assignment (a group may be submitted for a later step than it was drawn for).
  void iterate_partial() {
    const orchestrator::Assignment w = *work_;
    const int64_t oldest = w.step - rl_.async_level;
    if (static_cast<int64_t>(ready_.size()) < w.groups) {
      IterationStats it;
      const double t0 = monotonic_seconds();
      for (auto& g : pool_->iterate(w.step, oldest, &it)) ready_.push_back(std::move(g));
      generating_s_ += monotonic_seconds() - t0;
      purged_groups_ += it.purged_groups;
      stale_groups_ += it.stale_groups;
    }
    stale_groups_ +=
        std::erase_if(ready_, [&](const DrawnGroup& g) { return g.oldest_version() < oldest; });
    if (static_cast<int64_t>(ready_.size()) < w.groups || stop_) return;
    std::vector<DrawnGroup> taken(std::make_move_iterator(ready_.begin()),
                                  std::make_move_iterator(ready_.begin() + w.groups));
    ready_.erase(ready_.begin(), ready_.begin() + w.groups);
    std::vector<rl::RolloutGroup> groups;
    std::vector<env::Task> tasks;
    for (const DrawnGroup& g : taken) {
      groups.push_back(g.group);
      tasks.push_back(g.task);
      tasks.back().task_id = rollout::drawn_task_id(tasks.back().task_id, g.draw);
    }
    if (submit(w, std::move(groups), std::move(tasks)) == "dropped") {
      ready_.insert(ready_.begin(), std::make_move_iterator(taken.begin()),
                    std::make_move_iterator(taken.end()));
    }
    work_.reset();
  }

  // Sets the group advantages, writes the signed file and uploads it; returns what the
  // orchestrator made of it ("" when it was not used).
  std::string submit(const orchestrator::Assignment& work, std::vector<rl::RolloutGroup> groups,
                     std::vector<env::Task> tasks) {
    const int64_t step = work.step, submission = work.submission;
    double reward = 0, tokens = 0, samples = 0;
    int64_t signal_groups = 0, oldest = INT64_MAX, newest = 0;
    for (auto& g : groups) {
      std::vector<double> rewards;
      for (const auto& r : g.rollouts) {
        rewards.push_back(r.reward);
        reward += r.reward;
        tokens += static_cast<double>(r.tokens());
        samples += 1;
        for (int64_t v : r.versions) {
          oldest = std::min(oldest, v);
          newest = std::max(newest, v);
        }
      }
      const auto adv = rl::group_advantages(rewards, rl_.normalize_std);
      signal_groups += rl::has_signal(adv);
      for (size_t i = 0; i < adv.size(); ++i) g.rollouts[i].advantage = adv[i];
    }
    if (oldest > newest) oldest = newest = version_;  // only empty completions
    const SubmissionKey key{run_id_, identity_->address(), static_cast<int32_t>(step),
                            static_cast<int32_t>(submission)};
    const rollout::KeyValues metadata = {
        {"trellis.model", base_model_.filename().string()},
        {"trellis.policy_versions", fmt::format("{}-{}", oldest, newest)},
        {"trellis.node_address", identity_->address()}};
    const std::string file = rollout::encode_rollout_file(to_records(key, groups, tasks), metadata,
                                                          rollout::sign_body_with(*identity_));
    // Since the last file: completions decoding per engine forward (the batch the tail leaves) and
    // prompt tokens prefilled (C3PO++ re-prefills what is in flight at each new policy version).
    const auto engine_stats = engine_->stats();
    const double decode_batch =
        static_cast<double>(engine_stats.tokens_generated - last_file_stats_.tokens_generated) /
        static_cast<double>(std::max<int64_t>(1, engine_stats.steps - last_file_stats_.steps));
    const int64_t prefilled = engine_stats.prompt_tokens - last_file_stats_.prompt_tokens;
    last_file_stats_ = engine_stats;
    const std::string status = upload(step, submission, file);
    log::info(
        "step {} submission {}: versions {}-{}, {} groups ({} with signal), reward {:.3f}, "
        "{:.0f} tokens, {:.3f} s generating, decode batch {:.1f}, {} prefilled, waited {:.1f} s "
        "for weights and {:.1f} s for work{}: {}",
        step, submission, oldest, newest, groups.size(), signal_groups,
        reward / std::max(1.0, samples), tokens, generating_s_, decode_batch, prefilled,
        waited_for_weights_, waited_for_work_,
        partial_ ? fmt::format(", {} groups dropped (purged {}, stale {})",
                               purged_groups_ + stale_groups_, purged_groups_, stale_groups_)
                 : "",
        status == "dropped" ? "not needed (the step filled first)"
        : status.empty()    ? "not used"
                            : status);
    waited_for_weights_ = 0;
    waited_for_work_ = 0;
    generating_s_ = 0;
    return status;
  }

  // Uploads until the orchestrator answers and returns its status: a refusal (a rejected file)
  // drops the file and returns ""; an unreachable orchestrator is retried with the same bytes.
  std::string upload(int64_t step, int64_t submission, const std::string& file) {
    while (!stop_) {
      try {
        return client_.submit(*identity_, step, submission, file);
      } catch (const Error& e) {
        try {
          client_.status();
        } catch (const Error&) {
          log::warn("orchestrator unreachable; retrying the upload: {}", e.what());
          sleep();
          continue;
        }
        log::warn("step {} submission {} not used: {}", step, submission, e.what());
        return "";
      }
    }
    return "";
  }

  const Config& config_;
  model::Compute compute_;
  const std::atomic<bool>& stop_;
  rl::RlLoopConfig rl_;
  orchestrator::Client client_;
  std::string name_, run_id_;
  std::unique_ptr<Identity> identity_;
  fs::path base_model_;
  int64_t groups_per_submission_ = 1;
  double poll_s_ = 0.5, waited_for_weights_ = 0;
  std::unique_ptr<env::Environment> environment_;
  std::unique_ptr<rl::TaskSource> tasks_;
  std::unique_ptr<FixedDataSampler> sampler_;
  rl::RolloutOptions rollout_;   // without the seed, which each draw has
  toploc::ProofBuilder proofs_;  // before the engine, whose hidden-row thread feeds it
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<model::Prompting> prompting_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<PolicyFetcher> fetcher_;  // after the engine: it stops first
  int64_t version_ = -1;
  std::optional<orchestrator::Assignment>
      work_;                    // what the orchestrator handed out, until uploaded
  std::string wait_reason_;     // why the orchestrator said wait, last time
  double waited_for_work_ = 0;  // since the last file
  double generating_s_ = 0;     // in the engine and scoring since the last file
  engine::EngineStats last_file_stats_;
  // C3PO++ mode
  bool partial_ = false;
  PartialRolloutOptions partial_options_;
  std::unique_ptr<PartialRolloutPool> pool_;
  std::deque<DrawnGroup> ready_;
  int64_t purged_groups_ = 0, stale_groups_ = 0;
};

}  // namespace

void run_inference_worker(const Config& config, const fs::path& run_dir,
                          const model::Compute& compute, const std::atomic<bool>& stop) {
  Worker(config, run_dir, compute, stop).run();
}

}  // namespace trellis::pipeline
