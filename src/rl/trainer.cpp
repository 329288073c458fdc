#include "rl/trainer.h"

#include <algorithm>

#include "common/clock.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/flops.h"
#include "rl/packing.h"
#include "rl/precision.h"

namespace trellis::rl {
namespace {

std::vector<int64_t> input_lengths(const std::vector<Rollout>& batch,
                                   const std::vector<size_t>& which) {
  std::vector<int64_t> lengths;
  for (size_t i : which) lengths.push_back(batch[i].sequence.input_length());
  return lengths;
}

// The rollouts of batch[lo, hi) that `rank` of `world` trains: longest first, each to the rank
// with the fewest tokens so far (the lowest on a tie), in batch order. Every rank computes the
// same split.
std::vector<size_t> share_of(const std::vector<Rollout>& batch, size_t lo, size_t hi, int rank,
                             int world) {
  std::vector<size_t> order;
  for (size_t i = lo; i < hi; ++i) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return batch[a].sequence.input_length() > batch[b].sequence.input_length();
  });
  std::vector<int64_t> load(world, 0);
  std::vector<size_t> mine;
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += batch[i].sequence.input_length();
    if (r == rank) mine.push_back(i);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

}  // namespace

TrainerConfig TrainerConfig::from_config(const Config& c) {
  TrainerConfig t;
  t.loss.clip_eps = c.get<double>("loss.clip_eps");
  t.loss.clip_delta = c.get<double>("loss.clip_delta");
  t.loss.mismatch = parse_mismatch(c.get<std::string>("loss.mismatch"), "loss.mismatch");
  t.loss.icepop_low = c.get<double>("loss.icepop_low");
  t.loss.icepop_high = c.get<double>("loss.icepop_high");
  t.loss.tis_cap = c.get<double>("loss.tis_cap");
  t.loss.kl_coef = c.get<double>("loss.kl_coef");
  t.loss.entropy_coef = c.get<double>("loss.entropy_coef");
  t.loss.norm = parse_norm(c.get<std::string>("loss.norm"), "loss.norm");
  validate(t.loss);
  t.optimizer = OptimizerConfig::from_config(c, "trainer");
  t.optimizer_steps = c.get_at_least<int64_t>("trainer.optimizer_steps", 1);
  t.micro_batch_tokens = c.get_at_least<int64_t>("trainer.micro_batch_tokens", 1);
  t.max_completion_tokens = c.get_at_least<int64_t>("rl.max_tokens", 1);
  t.fp8 = Precision::from_config(c).train_fp8;
  t.activation_checkpointing = c.get<bool>("trainer.activation_checkpointing");
  return t;
}

Trainer::Trainer(model::Transformer& policy, TrainerConfig config,
                 std::unique_ptr<model::Transformer> reference, double peak_flops,
                 ProcessGroup* group)
    : policy_(policy),
      config_(config),
      reference_(std::move(reference)),
      peak_flops_(peak_flops),
      group_(group),
      optimizer_(policy.parameters(), config.optimizer, group) {
  validate(config_.loss);
  if ((config_.loss.kl_coef > 0) != (reference_ != nullptr)) {
    fail("loss.kl_coef", "a reference model is needed exactly when kl_coef > 0");
  }
}

Trainer::~Trainer() = default;

std::vector<torch::Tensor> Trainer::score(model::Transformer& model,
                                          const std::vector<Rollout>& batch,
                                          const std::vector<size_t>& which) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out(batch.size());
  auto bins = pack_first_fit_decreasing(input_lengths(batch, which), config_.micro_batch_tokens);
  for (auto& bin : bins) {
    for (size_t& j : bin) j = which[j];
    std::vector<const Sequence*> seqs;
    for (size_t i : bin) seqs.push_back(&batch[i].sequence);
    const auto logp = sequence_logprobs(model, pack_sequences(seqs), config_.vocab_limit, false,
                                        {.fp8 = config_.fp8})
                          .logp;
    int64_t offset = 0;
    for (size_t i : bin) {
      const int64_t n = batch[i].tokens();
      out[i] = logp.narrow(0, offset, n).cpu();
      offset += n;
    }
  }
  return out;
}

Metrics Trainer::step(const std::vector<Rollout>& batch) {
  if (batch.empty()) fail("trainer", "a rollout step needs at least one sample");
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].logprobs.size() != batch[i].sequence.completion.size()) {
      fail("rollout " + std::to_string(i), "{} behaviour log-probs for {} completion tokens",
           batch[i].logprobs.size(), batch[i].sequence.completion.size());
    }
  }
  const auto& cfg = config_.loss;
  const auto& mcfg = policy_.config();
  const int rank = group_ ? group_->rank() : 0, world = group_ ? group_->world() : 1;
  const double t0 = monotonic_seconds(), comm0 = group_ ? group_->comm_seconds() : 0;

  // Optimizer step k trains batch[k·S/n, (k+1)·S/n); this rank trains mine[k] of them.
  const size_t S = batch.size();
  const size_t n = std::min<size_t>(config_.optimizer_steps, S);
  std::vector<std::vector<size_t>> mine(n);
  std::vector<size_t> all_mine;
  for (size_t k = 0; k < n; ++k) {
    mine[k] = share_of(batch, k * S / n, (k + 1) * S / n, rank, world);
    all_mine.insert(all_mine.end(), mine[k].begin(), mine[k].end());
  }

  // logp_old once, with the weights at the start of the step (specs/rl.md §1).
  const auto logp_old = score(policy_, batch, all_mine);
  std::vector<torch::Tensor> logp_ref;
  if (reference_) logp_ref = score(*reference_, batch, all_mine);
  const double logp_old_seconds = monotonic_seconds() - t0;

  LossStats stats;
  double loss_sum = 0, grad_norm_sum = 0, lr = 0, tokens = 0, sum_sq = 0;
  double forward_backward_seconds = 0, optimizer_seconds = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t lo = k * S / n, hi = (k + 1) * S / n;
    // The loss weights of the whole optimizer step, whichever rank trains which sample.
    std::vector<int64_t> completion_lengths;
    for (size_t i = lo; i < hi; ++i) completion_lengths.push_back(batch[i].tokens());
    const TokenWeights tw =
        token_weights(cfg.norm, completion_lengths, config_.max_completion_tokens);
    std::vector<int64_t> weight_offset(hi - lo + 1, 0);
    for (size_t i = lo; i < hi; ++i)
      weight_offset[i - lo + 1] = weight_offset[i - lo] + batch[i].tokens();

    const double t_fb = monotonic_seconds();
    const auto lengths = input_lengths(batch, mine[k]);
    for (int64_t len : lengths) {
      tokens += len;
      sum_sq += static_cast<double>(len) * len;
    }
    const auto weights = torch::tensor(tw.weights), mean_weights = torch::tensor(tw.mean_weights);
    for (const auto& bin : pack_first_fit_decreasing(lengths, config_.micro_batch_tokens)) {
      std::vector<const Sequence*> seqs;
      std::vector<torch::Tensor> old, behav, adv, w, m, ref;
      for (size_t j : bin) {
        const size_t i = mine[k][j];
        const Rollout& r = batch[i];
        const int64_t len = r.tokens();
        seqs.push_back(&r.sequence);
        old.push_back(logp_old[i]);
        behav.push_back(torch::tensor(r.logprobs));
        adv.push_back(torch::full({len}, r.advantage, torch::kFloat32));
        w.push_back(weights.narrow(0, weight_offset[i - lo], len));
        m.push_back(mean_weights.narrow(0, weight_offset[i - lo], len));
        if (reference_) ref.push_back(logp_ref[i]);
      }
      const auto lp = sequence_logprobs(
          policy_, pack_sequences(seqs), config_.vocab_limit,
          /*with_entropy=*/true,
          {.fp8 = config_.fp8, .recompute_layers = config_.activation_checkpointing});
      const auto device = lp.logp.device();
      LossInputs in;
      in.logp = lp.logp;
      in.logp_old = torch::cat(old).to(device);
      in.logp_behav = torch::cat(behav).to(device);
      in.advantages = torch::cat(adv).to(device);
      in.weights = torch::cat(w).to(device);
      in.mean_weights = torch::cat(m).to(device);
      if (reference_) in.logp_ref = torch::cat(ref).to(device);
      in.entropy = cfg.entropy_coef > 0 ? lp.entropy : lp.entropy.detach();
      auto result = policy_loss(cfg, in);
      result.loss.backward();
      loss_sum += result.loss.item<double>();
      stats += result.stats;
    }
    model::synchronize(policy_.compute());
    const double t_opt = monotonic_seconds();
    forward_backward_seconds += t_opt - t_fb;
    const auto info = optimizer_.step();
    optimizer_seconds += monotonic_seconds() - t_opt;
    grad_norm_sum += info.grad_norm;
    lr = info.lr;
  }
  model::synchronize(policy_.compute());

  // Every rank's sums, and each rank's compute time in its own slot.
  double forward_backward_min = forward_backward_seconds,
         forward_backward_max = forward_backward_seconds;
  if (group_) {
    double* const sums[] = {&loss_sum,          &tokens,           &sum_sq,
                            &stats.tokens,      &stats.clip_low,   &stats.clip_high,
                            &stats.clip_delta,  &stats.masked_low, &stats.masked_high,
                            &stats.mismatch_k3, &stats.entropy,    &stats.kl};
    const int64_t k = std::size(sums);
    torch::Tensor t = torch::zeros({k + world}, torch::kFloat64);
    for (int64_t i = 0; i < k; ++i) t[i] = *sums[i];
    t[k + rank] = forward_backward_seconds;
    group_->all_reduce_sum(t);
    for (int64_t i = 0; i < k; ++i) *sums[i] = t[i].item<double>();
    forward_backward_min = t.narrow(0, k, world).min().item<double>();
    forward_backward_max = t.narrow(0, k, world).max().item<double>();
  }
  const double seconds = monotonic_seconds() - t0;

  Metrics m;
  const double tok = std::max(1.0, stats.tokens);
  m.set("loss", loss_sum / n);
  m.set("entropy", stats.entropy / tok);
  m.set("grad_norm", grad_norm_sum / n);
  m.set("lr", lr);
  m.set("clip/low_frac", stats.clip_low / tok);
  m.set("clip/high_frac", stats.clip_high / tok);
  m.set("clip/delta_frac", stats.clip_delta / tok);
  m.set("mismatch/k3", stats.mismatch_k3 / tok);
  m.set("mismatch/masked_low_frac", stats.masked_low / tok);
  m.set("mismatch/masked_high_frac", stats.masked_high / tok);
  if (reference_) m.set("kl/ref", stats.kl / tok);
  m.set("time/train", seconds);
  m.set("time/logp_old", logp_old_seconds);
  m.set("time/forward_backward", forward_backward_seconds);
  m.set("time/optimizer", optimizer_seconds);
  m.set("time/comm", (group_ ? group_->comm_seconds() : 0) - comm0);
  if (group_) {
    m.set("time/forward_backward_min", forward_backward_min);
    m.set("time/forward_backward_max", forward_backward_max);
  }
  m.set("memory/optimizer_mib", static_cast<double>(optimizer_.state_bytes()) / (1 << 20));
  m.set("throughput/train_tok_s", tokens / seconds);
  if (peak_flops_ > 0) {
    // Forward + backward per optimizer pass, plus the no-grad forwards (a third of that each).
    const double passes = 1.0 + (1.0 + (reference_ ? 1.0 : 0.0)) / 3.0;
    const double flops = passes * model::train_flops(mcfg, static_cast<int64_t>(tokens), sum_sq);
    m.set("throughput/mfu", flops / seconds / (peak_flops_ * world));
  }
  return m;
}

std::unique_ptr<Trainer> make_trainer(TrainerConfig config, int64_t vocab_limit,
                                      model::Transformer& policy,
                                      const std::filesystem::path& base_model,
                                      const model::Compute& compute, double peak_flops,
                                      ProcessGroup* group) {
  config.vocab_limit = vocab_limit;
  std::unique_ptr<model::Transformer> reference;
  if (config.loss.kl_coef > 0) reference = model::load_transformer(base_model, compute);
  policy.set_requires_grad(true);
  return std::make_unique<Trainer>(policy, config, std::move(reference), peak_flops, group);
}

}  // namespace trellis::rl
