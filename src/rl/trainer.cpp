#include "rl/trainer.h"

#include <chrono>

#include "common/error.h"
#include "model/flops.h"
#include "rl/packing.h"

namespace trellis::rl {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sync(const model::Compute& c) {
  if (c.device.is_cuda()) torch::cuda::synchronize();
}

std::vector<int64_t> input_lengths(const std::vector<Rollout>& batch, size_t lo, size_t hi) {
  std::vector<int64_t> lengths;
  for (size_t i = lo; i < hi; ++i) lengths.push_back(batch[i].sequence.input_length());
  return lengths;
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
  return t;
}

Trainer::Trainer(model::Transformer& policy, TrainerConfig config,
                 std::unique_ptr<model::Transformer> reference, double peak_flops)
    : policy_(policy),
      config_(config),
      reference_(std::move(reference)),
      peak_flops_(peak_flops),
      optimizer_(policy.parameters(), config.optimizer) {
  validate(config_.loss);
  if ((config_.loss.kl_coef > 0) != (reference_ != nullptr)) {
    fail("loss.kl_coef", "a reference model is needed exactly when kl_coef > 0");
  }
}

Trainer::~Trainer() = default;

std::vector<torch::Tensor> Trainer::score(model::Transformer& model,
                                          const std::vector<Rollout>& batch) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out(batch.size());
  const auto bins =
      pack_first_fit_decreasing(input_lengths(batch, 0, batch.size()), config_.micro_batch_tokens);
  for (const auto& bin : bins) {
    std::vector<const Sequence*> seqs;
    for (size_t i : bin) seqs.push_back(&batch[i].sequence);
    const auto logp =
        sequence_logprobs(model, pack_sequences(seqs), config_.vocab_limit, false).logp;
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
  const double t0 = now_s();

  // logp_old once, with the weights at the start of the step (specs/rl.md §1).
  const auto logp_old = score(policy_, batch);
  std::vector<torch::Tensor> logp_ref;
  if (reference_) logp_ref = score(*reference_, batch);
  const double logp_old_seconds = now_s() - t0;

  const size_t S = batch.size();
  const size_t n = std::min<size_t>(config_.optimizer_steps, S);
  LossStats stats;
  double loss_sum = 0, grad_norm_sum = 0, lr = 0, tokens = 0, sum_sq = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t lo = k * S / n, hi = (k + 1) * S / n;
    std::vector<int64_t> completion_lengths;
    for (size_t i = lo; i < hi; ++i) completion_lengths.push_back(batch[i].tokens());
    const TokenWeights tw =
        token_weights(cfg.norm, completion_lengths, config_.max_completion_tokens);
    std::vector<int64_t> weight_offset(hi - lo + 1, 0);
    for (size_t i = lo; i < hi; ++i)
      weight_offset[i - lo + 1] = weight_offset[i - lo] + batch[i].tokens();

    const auto lengths = input_lengths(batch, lo, hi);
    for (int64_t len : lengths) {
      tokens += len;
      sum_sq += static_cast<double>(len) * len;
    }
    const auto weights = torch::tensor(tw.weights), mean_weights = torch::tensor(tw.mean_weights);
    double step_loss = 0;
    for (const auto& bin : pack_first_fit_decreasing(lengths, config_.micro_batch_tokens)) {
      std::vector<const Sequence*> seqs;
      std::vector<torch::Tensor> old, behav, adv, w, m, ref;
      for (size_t j : bin) {
        const Rollout& r = batch[lo + j];
        const int64_t len = r.tokens();
        seqs.push_back(&r.sequence);
        old.push_back(logp_old[lo + j]);
        behav.push_back(torch::tensor(r.logprobs));
        adv.push_back(torch::full({len}, r.advantage, torch::kFloat32));
        w.push_back(weights.narrow(0, weight_offset[j], len));
        m.push_back(mean_weights.narrow(0, weight_offset[j], len));
        if (reference_) ref.push_back(logp_ref[lo + j]);
      }
      const auto lp = sequence_logprobs(policy_, pack_sequences(seqs), config_.vocab_limit,
                                        /*with_entropy=*/true);
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
      step_loss += result.loss.item<double>();
      stats += result.stats;
    }
    const auto info = optimizer_.step();
    loss_sum += step_loss;
    grad_norm_sum += info.grad_norm;
    lr = info.lr;
  }
  sync(policy_.compute());
  const double seconds = now_s() - t0;

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
  m.set("throughput/train_tok_s", tokens / seconds);
  if (peak_flops_ > 0) {
    // Forward + backward per optimizer pass, plus the no-grad forwards (a third of that each).
    const double passes = 1.0 + (1.0 + (reference_ ? 1.0 : 0.0)) / 3.0;
    const double flops = passes * model::train_flops(mcfg, static_cast<int64_t>(tokens), sum_sq);
    m.set("throughput/mfu", flops / seconds / peak_flops_);
  }
  return m;
}

}  // namespace trellis::rl
