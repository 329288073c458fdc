// Trainer tests: packed log-probs against a per-sample forward with plain loops, packed against
// unpacked gradients, and a whole rollout step (logp_old once, several optimizer steps) against
// an independent re-computation with unpacked forwards and libtorch's AdamW.
#include "rl/trainer.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "rl/sequence_logprobs.h"

namespace trellis::rl {
namespace {

const model::Compute kFp32{torch::kCPU, torch::kFloat32};

std::unique_ptr<model::Transformer> tiny_model(uint64_t seed = 3) {
  auto c = model::preset_config(model::Arch::Qwen2, "tiny");
  c.num_hidden_layers = 2;
  auto m = std::make_unique<model::Transformer>(c, kFp32);
  m->init_random(seed);
  return m;
}

void copy_weights(const model::Transformer& from, model::Transformer& to) {
  torch::NoGradGuard g;
  for (const auto& [name, p] : from.named_parameters()) to.parameter(name).copy_(p);
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  return v;
}

// A batch of rollouts with random prompts, completions, advantages and behaviour log-probs near
// the model's own (so that ratios fall on both sides of the clip and IcePop bands).
std::vector<Rollout> random_batch(model::Transformer& m, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Rollout> batch(n);
  for (int i = 0; i < n; ++i) {
    Rollout& r = batch[i];
    r.sequence.prompt = random_ids(rng, std::uniform_int_distribution<int>(1, 12)(rng), 300);
    r.sequence.completion = random_ids(rng, std::uniform_int_distribution<int>(1, 10)(rng), 300);
    r.sequence.temperature = i % 2 ? 0.7 : 1.0;
    r.advantage = std::uniform_real_distribution<double>(-1.5, 1.5)(rng);
  }
  std::vector<const Sequence*> seqs;
  for (const auto& r : batch) seqs.push_back(&r.sequence);
  torch::NoGradGuard g;
  const auto lp = sequence_logprobs(m, pack_sequences(seqs), 300, false).logp;
  int64_t off = 0;
  std::normal_distribution<double> noise(0, 0.4);
  for (auto& r : batch) {
    for (int64_t t = 0; t < r.tokens(); ++t)
      r.logprobs.push_back(std::min(0.0, lp[off + t].item<double>() + noise(rng)));
    off += r.tokens();
  }
  return batch;
}

TEST(SequenceLogprobs, PackedMatchPerSampleForwardWithPlainLoops) {
  auto m = tiny_model();
  std::mt19937 rng(5);
  std::vector<Sequence> seqs(3);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].prompt = random_ids(rng, 3 + 4 * i, 320);
    seqs[i].completion = random_ids(rng, 5 - i, 300);
    seqs[i].temperature = 0.5 + 0.4 * i;
  }
  const int64_t vocab_limit = 300;  // the tokenizer's size below the model's padded 320
  std::vector<const Sequence*> ptrs;
  for (const auto& s : seqs) ptrs.push_back(&s);
  torch::NoGradGuard g;
  const auto got = sequence_logprobs(*m, pack_sequences(ptrs), vocab_limit, true);
  int64_t k = 0;
  for (const auto& s : seqs) {
    std::vector<int64_t> ids(s.prompt.begin(), s.prompt.end());
    ids.insert(ids.end(), s.completion.begin(), s.completion.end() - 1);
    const auto logits = m->forward(torch::tensor(ids, torch::kInt64)).logits.to(torch::kFloat64);
    for (size_t j = 0; j < s.completion.size(); ++j, ++k) {
      const auto row = logits[s.prompt.size() - 1 + j];
      double mx = -1e300;
      for (int64_t v = 0; v < vocab_limit; ++v)
        mx = std::max(mx, row[v].item<double>() / s.temperature);
      double z = 0;
      for (int64_t v = 0; v < vocab_limit; ++v)
        z += std::exp(row[v].item<double>() / s.temperature - mx);
      double entropy = 0;
      for (int64_t v = 0; v < vocab_limit; ++v) {
        const double lp = row[v].item<double>() / s.temperature - mx - std::log(z);
        entropy -= std::exp(lp) * lp;
      }
      const double want = row[s.completion[j]].item<double>() / s.temperature - mx - std::log(z);
      EXPECT_NEAR(got.logp[k].item<double>(), want, 1e-4) << "token " << k;
      EXPECT_NEAR(got.entropy[k].item<double>(), entropy, 1e-4) << "token " << k;
    }
  }
  EXPECT_EQ(k, got.logp.size(0));
}

// The loss of a batch computed in one packed forward and in one forward per sample: the same
// gradient for every parameter.
TEST(SequenceLogprobs, PackedAndUnpackedGradientsAgree) {
  auto m = tiny_model();
  auto batch = random_batch(*m, 6, 11);
  LossConfig cfg;
  cfg.entropy_coef = 0.01;
  std::vector<int64_t> lengths;
  for (const auto& r : batch) lengths.push_back(r.tokens());
  const auto tw = token_weights(LossNorm::Sequence, lengths, 16);

  auto loss_of = [&](const std::vector<size_t>& which, int64_t first_token) {
    std::vector<const Sequence*> seqs;
    std::vector<float> behav, adv;
    for (size_t i : which) {
      seqs.push_back(&batch[i].sequence);
      behav.insert(behav.end(), batch[i].logprobs.begin(), batch[i].logprobs.end());
      adv.insert(adv.end(), batch[i].tokens(), static_cast<float>(batch[i].advantage));
    }
    const auto lp = sequence_logprobs(*m, pack_sequences(seqs), 300, true);
    const int64_t n = lp.logp.size(0);
    LossInputs in;
    in.logp = lp.logp;
    in.logp_old = lp.logp.detach() + 0.1;  // r != 1, so clipping takes part
    in.logp_behav = torch::tensor(behav);
    in.advantages = torch::tensor(adv);
    in.weights = torch::tensor(tw.weights).narrow(0, first_token, n);
    in.mean_weights = torch::tensor(tw.mean_weights).narrow(0, first_token, n);
    in.entropy = lp.entropy;
    return policy_loss(cfg, in).loss;
  };
  auto grads = [&] {
    std::vector<torch::Tensor> g;
    for (auto& p : m->parameters()) {
      g.push_back(p.grad().clone());
      p.mutable_grad().zero_();
    }
    return g;
  };
  m->set_requires_grad(true);
  loss_of({0, 1, 2, 3, 4, 5}, 0).backward();
  const auto packed = grads();
  int64_t first = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    loss_of({i}, first).backward();
    first += batch[i].tokens();
  }
  const auto unpacked = grads();
  double max_rel = 0;
  for (size_t i = 0; i < packed.size(); ++i) {
    const double scale = packed[i].abs().max().item<double>() + 1e-12;
    max_rel = std::max(max_rel, (packed[i] - unpacked[i]).abs().max().item<double>() / scale);
  }
  EXPECT_LT(max_rel, 1e-4);
  EXPECT_GT(packed[0].abs().sum().item<double>(), 0);
}

// Trainer::step with two optimizer steps and small micro-batches against the same update computed
// independently: logp_old from the weights before the step, each half of the batch in one
// unpacked forward per sample, gradients clipped, libtorch AdamW at the warm-up learning rate.
TEST(Trainer, StepMatchesIndependentComputation) {
  auto a = tiny_model(), b = tiny_model();
  copy_weights(*a, *b);
  auto batch = random_batch(*a, 8, 21);
  TrainerConfig tc;
  tc.optimizer.lr = 1e-3;
  tc.optimizer.warmup_steps = 4;
  tc.optimizer.max_grad_norm = 0.5;
  tc.optimizer_steps = 2;
  tc.micro_batch_tokens = 24;  // several micro-batches per optimizer step
  tc.max_completion_tokens = 16;
  tc.vocab_limit = 300;
  tc.loss.mismatch = Mismatch::Tis;
  a->set_requires_grad(true);
  Trainer trainer(*a, tc);
  const Metrics metrics = trainer.step(batch);

  // Independent: logp_old per sample from the initial weights.
  b->set_requires_grad(true);
  auto logp_of = [&](const Rollout& r) {
    return sequence_logprobs(*b, pack_sequences({&r.sequence}), 300, true);
  };
  std::vector<torch::Tensor> old;
  {
    torch::NoGradGuard g;
    for (const auto& r : batch) old.push_back(logp_of(r).logp.clone());
  }
  torch::optim::AdamW adamw(b->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  double loss_sum = 0;
  for (int k = 0; k < 2; ++k) {
    std::vector<int64_t> lengths;
    for (int i = 4 * k; i < 4 * k + 4; ++i) lengths.push_back(batch[i].tokens());
    const auto tw = token_weights(LossNorm::Token, lengths, 16);
    int64_t off = 0;
    for (int i = 4 * k; i < 4 * k + 4; ++i) {
      const auto& r = batch[i];
      const auto lp = logp_of(r);
      LossInputs in;
      in.logp = lp.logp;
      in.logp_old = old[i];
      in.logp_behav = torch::tensor(r.logprobs);
      in.advantages = torch::full({r.tokens()}, r.advantage);
      in.weights = torch::tensor(tw.weights).narrow(0, off, r.tokens());
      in.mean_weights = torch::tensor(tw.mean_weights).narrow(0, off, r.tokens());
      in.entropy = lp.entropy.detach();
      auto loss = policy_loss(tc.loss, in).loss;
      loss.backward();
      loss_sum += loss.item<double>();
      off += r.tokens();
    }
    torch::nn::utils::clip_grad_norm_(b->parameters(), 0.5);
    for (auto& group : adamw.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(1e-3 * (k + 1) / 4);
    adamw.step();
    adamw.zero_grad();
  }
  EXPECT_NEAR(metrics.get("loss"), loss_sum / 2, 1e-5);
  EXPECT_DOUBLE_EQ(metrics.get("lr"), 1e-3 * 2 / 4);
  // Two AdamW steps move weights by up to ~7.5e-4; float rounding in tiny gradient components
  // leaves differences far below that (logp_old recomputed between the steps would not).
  auto init = tiny_model();
  double moved = 0;
  for (const auto& [name, p] : a->named_parameters()) {
    const auto q = b->parameter(name);
    EXPECT_LT((p - q).abs().max().item<double>(), 1e-5) << name;
    moved = std::max(moved, (p - init->parameter(name)).abs().max().item<double>());
  }
  EXPECT_GT(moved, 5e-4);
  for (const char* key :
       {"entropy", "grad_norm", "clip/low_frac", "clip/high_frac", "clip/delta_frac", "mismatch/k3",
        "mismatch/masked_low_frac", "mismatch/masked_high_frac", "throughput/train_tok_s"}) {
    EXPECT_TRUE(metrics.has(key)) << key;
  }
  EXPECT_GT(metrics.get("mismatch/k3"), 0);  // the behaviour log-probs were perturbed
}

TEST(Trainer, RejectsMissingBehaviourLogprobs) {
  auto m = tiny_model();
  auto batch = random_batch(*m, 2, 1);
  batch[1].logprobs.pop_back();
  m->set_requires_grad(true);
  Trainer trainer(*m, TrainerConfig{});
  EXPECT_THROW(trainer.step(batch), Error);
  EXPECT_THROW(trainer.step({}), Error);
}

}  // namespace
}  // namespace trellis::rl
