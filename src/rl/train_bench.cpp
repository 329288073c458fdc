#include "rl/train_bench.h"

#include "common/rng.h"
#include "model/flops.h"
#include "rl/trainer.h"

namespace trellis::rl {

TrainBenchResult bench_train(model::Transformer& model, const TrainBenchOptions& o,
                             const std::function<void(int64_t, double)>& on_step) {
  const int64_t vocab = model.config().vocab_size;
  RandomStream rng(o.seed);
  // Random token ids and advantages; behaviour log-probs are the trainer's own plus noise once
  // logp_old is known, so IcePop and the clip statistics do real work.
  std::vector<Rollout> batch(o.batch);
  for (auto& r : batch) {
    const int64_t len =
        rng.uniform_int(std::max<int64_t>(1, o.completion_len / 2), o.completion_len);
    for (int64_t i = 0; i < o.prompt_len; ++i)
      r.sequence.prompt.push_back(rng.uniform_int(0, vocab - 1));
    for (int64_t i = 0; i < len; ++i) {
      r.sequence.completion.push_back(rng.uniform_int(0, vocab - 1));
      r.logprobs.push_back(static_cast<float>(-std::log(double(vocab)) - 0.1 * rng.uniform()));
    }
    r.advantage = rng.uniform() * 2 - 1;
  }
  TrainerConfig config;
  config.optimizer.lr = 1e-6;
  config.optimizer_steps = o.optimizer_steps;
  config.micro_batch_tokens = std::max(o.micro_batch_tokens, o.prompt_len + o.completion_len);
  config.max_completion_tokens = o.completion_len;
  config.fp8 = o.fp8;
  config.activation_checkpointing = o.activation_checkpointing;
  TrainBenchResult r;
  r.matmul_flops = model::measure_matmul_flops(model.compute());
  model.set_requires_grad(true);
  Trainer trainer(model, config, nullptr, r.matmul_flops);
  trainer.step(batch);  // warm-up: allocator and kernel selection
  double flops = 0;
  for (int64_t s = 0; s < o.steps; ++s) {
    const Metrics m = trainer.step(batch);
    r.seconds += m.get("time/train");
    r.logp_old_seconds += m.get("time/logp_old");
    flops += m.get("throughput/mfu") * m.get("time/train") * r.matmul_flops;
    r.final_loss = m.get("loss");
    ++r.steps;
    if (on_step) on_step(r.steps, r.final_loss);
  }
  for (const auto& x : batch) r.tokens += x.sequence.input_length() * r.steps;
  r.tokens_per_s = r.tokens / r.seconds;
  r.mfu = flops / r.seconds / r.matmul_flops;
  model.set_requires_grad(false);
  return r;
}

}  // namespace trellis::rl
