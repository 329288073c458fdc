#include "pipeline/trainer_service.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/json.h"
#include "common/logging.h"
#include "model/checkpoint.h"
#include "model/flops.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "pipeline/policy_publisher.h"
#include "pipeline/rollout_rows.h"
#include "rl/advantages.h"
#include "rl/checkpoints.h"
#include "rl/metrics_log.h"
#include "rl/rl_loop.h"
#include "rl/sample_stats.h"
#include "rl/trainer.h"
#include "rl/trainer_ranks.h"
#include "rollout/rollout_file.h"

namespace trellis::pipeline {
namespace fs = std::filesystem;
namespace {

class TrainerService {
 public:
  TrainerService(const Config& config, const fs::path& run_dir, bool resume,
                 const model::Compute& compute, rl::ProcessGroup& group,
                 const std::atomic<bool>& stop)
      : run_dir_(run_dir),
        stop_(stop),
        cfg_(rl::RlLoopConfig::from_config(config)),
        client_(orchestrator::client_url(config),
                orchestrator::client_token(config, run_dir, orchestrator::Role::kTrainer)) {
    poll_s_ = config.get_at_least<double>("infer.poll_s", 0.01);
    base_model_ = config.get<std::string>("model.path");
    if (base_model_.empty())
      fail("model.path", "no model: set [model] path (a Hugging Face directory)");
    fs::path weights = base_model_;
    std::optional<fs::path> checkpoint;
    if (resume) {
      checkpoint = rl::latest_checkpoint(run_dir / "checkpoints");
      if (!checkpoint)
        fail((run_dir / "checkpoints").string(), "--resume: no checkpoint to resume from");
      weights = *checkpoint;
    }
    model_ = model::load_transformer(weights, compute);
    const auto prompting = model::Prompting::load(base_model_, model_->config());
    trainer_ = rl::make_trainer(rl::TrainerConfig::from_config(config), prompting.tok.vocab_size(),
                                *model_, base_model_, compute, model::measure_matmul_flops(compute),
                                &group);
    ranks_ = std::make_unique<rl::RankLeader>(group, *trainer_);
    if (checkpoint) {
      start_step_ = ranks_->resume(*checkpoint).at("step");
      log::info("resuming at step {} from {}", start_step_, checkpoint->string());
    }
    log::info(
        "trainer: {} on {} ({} rank{}), {} steps of {} samples ({} per prompt), async "
        "level {}",
        weights.string(), compute.describe(), group.world(), group.world() > 1 ? "s" : "",
        cfg_.steps, cfg_.batch_size, cfg_.group_size, cfg_.async_level);
    publisher_ = std::make_unique<PolicyPublisher>(config, run_dir, stop, compute.bf16());
    log::info("orchestrator {}, policies through the origin {}", client_.base_url(),
              publisher_->origin_url());
  }

  void run() {
    rl::MetricsLog log(run_dir_ / "metrics.jsonl", start_step_);
    trained_ = trained_before(run_dir_ / "metrics.jsonl");
    // Versions beyond the checkpoint belong to a timeline this run no longer continues.
    publisher_->remove_versions_after(start_step_);
    publisher_->publish(start_step_, *model_);
    for (int64_t s = start_step_; s < cfg_.steps && !stop_; ++s) {
      const double t0 = monotonic_seconds();
      std::vector<rollout::RolloutRecord> rows;
      if (!wait_for_step(s, rows)) break;  // stopped
      const double waited = monotonic_seconds() - t0;
      rl::Metrics m = batch_from_rows(s, rows);
      m.set("time/wait_for_data", waited);
      if (batch_.empty()) {
        log::warn("step {}: no group with signal in the accepted files; no update", s);
      } else {
        m.append(ranks_->step(batch_));
      }
      rl::write_total_clip(m);
      publisher_->publish(s + 1, *model_);
      if (s + 1 == cfg_.steps ||
          (cfg_.checkpoint_every > 0 && (s + 1) % cfg_.checkpoint_every == 0)) {
        checkpoint(s + 1);
      }
      const double step_time = monotonic_seconds() - t0;
      m.set("time/step", step_time);
      m.set("trainer/idle_frac", waited / std::max(1e-9, step_time));
      write_broadcast_metrics(publisher_->last_broadcast(), m);
      trained_ += static_cast<int64_t>(batch_.size());
      m.set("samples/trained", static_cast<double>(trained_));
      try {  // what the workers, the orchestrator and its validators did so far, for the report
        write_pool_metrics(client_.status(), m);
      } catch (const Error&) {
      }
      log.write(s, m);
      try {  // the dashboard plots it; the run does not depend on it
        client_.report_metrics(s, rl::to_json(m));
      } catch (const Error& e) {
        log::warn("step {}: {}", s, e.what());
      }
      recent_.add(m);
      std::printf("%s\n", rl::console_line(s, cfg_.steps, m, rl::rl_console_fields()).c_str());
      std::fflush(stdout);
    }
    ranks_->stop();
  }

 private:
  // Samples trained by the steps already in metrics.jsonl (a resumed run's earlier steps).
  static int64_t trained_before(const fs::path& metrics) {
    int64_t n = 0;
    std::error_code ec;
    if (!fs::exists(metrics, ec)) return 0;
    std::istringstream lines(read_file(metrics));
    for (std::string line; std::getline(lines, line);) {
      try {
        n += Json::parse(line).value("samples", 0.0);
      } catch (const Json::exception&) {  // a line cut short by a crash
      }
    }
    return n;
  }

  // What the newest published version cost to broadcast: its full size and what a worker holding
  // the version before it downloads (its delta, or the full file without one).
  static void write_broadcast_metrics(const BroadcastStats& b, rl::Metrics& m) {
    if (b.version < 0) return;
    m.set("broadcast/version", static_cast<double>(b.version));
    m.set("broadcast/full_bytes", static_cast<double>(b.full_bytes));
    m.set("broadcast/bytes", static_cast<double>(b.bytes));
    if (b.unchanged_fraction < 0) return;
    m.set("broadcast/unchanged_frac", b.unchanged_fraction);
    m.set("broadcast/changed_bytes", static_cast<double>(b.changed_bytes));
  }

  // The pool's side of the step (orchestrator/client.h Status): files by status, samples generated
  // (whatever became of them) and dropped unjudged, the validation backlog and how fast
  // validators decide. samples/generated over samples/trained is what admission control bounds.
  static void write_pool_metrics(const orchestrator::Status& status, rl::Metrics& m) {
    m.set("throughput/rollout_tok_s", status.rollout_tokens_per_s);
    m.set("submissions/accepted", static_cast<double>(status.accepted));
    m.set("submissions/rejected", static_cast<double>(status.rejected));
    m.set("submissions/validating", static_cast<double>(status.validating));
    m.set("submissions/dropped", static_cast<double>(status.dropped));
    m.set("samples/generated", static_cast<double>(status.generated_samples));
    m.set("samples/dropped", static_cast<double>(status.dropped_samples));
    m.set("validation/backlog_samples", static_cast<double>(status.validating_samples));
    m.set("validation/backlog_steps",
          static_cast<double>(status.validating_samples) /
              static_cast<double>(std::max<int64_t>(1, status.batch_size)));
    m.set("validation/judged_samples_per_s", status.judged_samples_per_s);
  }

  // Polls until the accepted files of step s hold batch_size signal samples, then downloads
  // them (in acceptance order) into `rows`. False when stopped first.
  bool wait_for_step(int64_t s, std::vector<rollout::RolloutRecord>& rows) {
    double last_warning = -1e9;
    while (!stop_) {
      try {
        const auto files = client_.accepted(s);
        int64_t signal = 0;
        for (const auto& f : files) signal += f.signal_samples;
        if (signal >= cfg_.batch_size) {
          for (const auto& f : files) {
            const std::string bytes = client_.download(s, f);
            const std::string where = fmt::format("step {} file {}", s, f.name);
            if (sha256_hex(bytes) != f.sha256)
              fail(where, "the download does not match the accepted file's SHA-256");
            auto file = rollout::decode_rollout_file(bytes, where);
            for (auto& r : file.rows) rows.push_back(std::move(r));
          }
          return true;
        }
      } catch (const Error& e) {
        rows.clear();
        if (monotonic_seconds() - last_warning > 10) {
          log::warn("waiting for step {}: {}", s, e.what());
          last_warning = monotonic_seconds();
        }
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(poll_s_));
    }
    return false;
  }

  // Groups the rows (file, group_index), drops stale and signal-less groups, recomputes the
  // advantages and fills batch_ with the first batch_size / group_size groups.
  rl::Metrics batch_from_rows(int64_t s, const std::vector<rollout::RolloutRecord>& rows) {
    batch_.clear();
    std::vector<std::vector<const rollout::RolloutRecord*>> groups;
    std::map<std::tuple<std::string, int32_t, int32_t>, size_t> index;
    for (const auto& r : rows) {
      const auto key = std::make_tuple(r.node_address, r.submission, r.group_index);
      auto [it, inserted] = index.emplace(key, groups.size());
      if (inserted) groups.emplace_back();
      groups[it->second].push_back(&r);
    }
    rl::SampleStats stats;
    int64_t zero_adv = 0, stale = 0;
    const size_t groups_needed = static_cast<size_t>(cfg_.batch_size / cfg_.group_size);
    size_t kept = 0;
    for (const auto& g : groups) {
      std::vector<rl::Rollout> rollouts;
      std::vector<double> rewards;
      bool too_old = false;
      for (const auto* row : g) {
        rollouts.push_back(from_record(*row));
        // The trainer scores at the configured temperature, as the single-process loop does.
        rollouts.back().sequence.temperature = cfg_.temperature;
        rewards.push_back(rollouts.back().reward);
        for (int32_t v : row->token_versions) too_old |= v < s - cfg_.async_level;
      }
      if (too_old) {
        stale += static_cast<int64_t>(g.size());
        continue;
      }
      for (const auto& r : rollouts) stats.add(r);
      const auto adv = rl::group_advantages(rewards, cfg_.normalize_std);
      if (!rl::has_signal(adv)) {
        ++zero_adv;
        continue;
      }
      if (kept == groups_needed) continue;
      ++kept;
      for (size_t i = 0; i < rollouts.size(); ++i) {
        rollouts[i].advantage = adv[i];
        batch_.push_back(std::move(rollouts[i]));
      }
    }
    rl::Metrics m;
    stats.write(m);
    m.set("filter/zero_adv_groups", static_cast<double>(zero_adv));
    m.set("samples", static_cast<double>(batch_.size()));
    m.set("rollouts/discarded_stale", static_cast<double>(stale));
    rl::write_staleness(batch_, s, m);
    return m;
  }

  void checkpoint(int64_t next_step) {
    const fs::path dir = ranks_->checkpoint([&] {
      return rl::save_checkpoint(run_dir_ / "checkpoints", next_step, *model_,
                                 trainer_->optimizer(), base_model_, Json::object());
    });
    rl::prune_checkpoints(run_dir_ / "checkpoints", cfg_.keep_checkpoints);
    log::info("checkpoint {}", dir.string());
  }

  fs::path run_dir_;
  const std::atomic<bool>& stop_;
  rl::RlLoopConfig cfg_;
  orchestrator::Client client_;
  double poll_s_ = 0.5;
  fs::path base_model_;
  std::unique_ptr<PolicyPublisher> publisher_;
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<rl::Trainer> trainer_;
  std::unique_ptr<rl::RankLeader> ranks_;
  std::vector<rl::Rollout> batch_;
  rl::RecentReward recent_;
  int64_t start_step_ = 0;
  int64_t trained_ = 0;  // samples trained over the run, resumed steps included
};

}  // namespace

void run_trainer_service(const Config& config, const fs::path& run_dir, bool resume,
                         const model::Compute& compute, rl::ProcessGroup& group,
                         const std::atomic<bool>& stop) {
  TrainerService(config, run_dir, resume, compute, group, stop).run();
}

}  // namespace trellis::pipeline
