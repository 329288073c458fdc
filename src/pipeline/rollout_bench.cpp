#include "pipeline/rollout_bench.h"

#include "common/clock.h"
#include "env/registry.h"
#include "model/prompting.h"
#include "pipeline/fixed_data_sampler.h"
#include "pipeline/partial_rollouts.h"
#include "rl/rl_loop.h"
#include "rl/rollouts.h"
#include "rl/task_source.h"
#include "toploc/proof_builder.h"

namespace trellis::pipeline {

RolloutBenchResult bench_rollouts(model::Transformer& model, const std::string& model_dir,
                                  const Config& config, const RolloutBenchOptions& options,
                                  const std::function<void(int64_t, double)>& on_step) {
  const auto rl = rl::RlLoopConfig::from_config(config);
  const auto environment = env::make_environment(config);
  const rl::TaskSource tasks(*environment, config, rl.seed);
  const FixedDataSampler sampler(tasks, "bench", config);  // the same prompts in both modes
  const auto prompting = model::Prompting::load(model_dir, model.config());
  const int64_t per_submission = config.get_at_least<int64_t>("infer.groups_per_submission", 1);
  auto ro = rl::rollout_options(rl, config);

  engine::Engine engine(model,
                        worker_engine_options(config, options.partial, prompting.tok.vocab_size()));
  toploc::ProofBuilder proofs;
  if (options.proofs) {
    ro.proofs = &proofs;
    rl::feed_proofs(engine, proofs);
  }
  std::unique_ptr<PartialRolloutPool> pool;
  if (options.partial) {
    pool = std::make_unique<PartialRolloutPool>(engine, prompting, *environment, sampler, ro,
                                                PartialRolloutOptions::from_config(config));
  }

  RolloutBenchResult r;
  double completion_tokens = 0, completions = 0;
  const auto count = [&](const rl::RolloutGroup& g) {
    ++r.groups;
    for (const auto& ro : g.rollouts) {
      completion_tokens += static_cast<double>(ro.tokens());
      completions += 1;
      r.proof_bytes += static_cast<int64_t>(ro.proof.size());
    }
  };
  const auto before = engine.stats();
  for (int64_t step = 0; step < options.steps; ++step) {
    const double t0 = monotonic_seconds();
    int64_t done = 0;
    if (pool) {
      while (done < options.groups_per_step) {
        IterationStats it;
        for (const auto& g : pool->iterate(step, 0, &it)) {
          count(g.group);
          ++done;
        }
        r.dropped_groups += it.purged_groups + it.stale_groups;
      }
    } else {
      for (int64_t submission = 0; done < options.groups_per_step; ++submission) {
        const auto batch = sampler.draw(step, submission, per_submission);
        auto o = ro;
        o.seed = sampler.seed(step, submission);
        for (const auto& g : rl::generate_rollouts(engine, prompting, *environment, batch, o)) {
          count(g);
          ++done;
        }
      }
    }
    // The next policy version: the same weights, but what is in flight re-prefills.
    engine.update_weights([](model::Transformer&) {}, step + 1);
    const double seconds = monotonic_seconds() - t0;
    r.seconds += seconds;
    if (on_step) on_step(step, seconds);
  }
  const auto after = engine.stats();
  r.steps = options.steps;
  r.tokens = after.tokens_generated - before.tokens_generated;
  r.forwards = after.steps - before.steps;
  r.prefilled = after.prompt_tokens - before.prompt_tokens;
  r.completion_tokens = completion_tokens / std::max(1.0, completions);
  r.proving_seconds = proofs.proving_seconds();
  r.adding_seconds = proofs.adding_seconds();
  return r;
}

}  // namespace trellis::pipeline
