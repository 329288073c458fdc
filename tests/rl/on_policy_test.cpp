// The trainer scores the engine's rollouts with the engine's own numbers: the mismatch between
// behaviour log-probs (sampled by the engine's batched paged decode) and the trainer's packed
// forward, with and without autograd, in each precision flow (docs/fp8.md). Both sides run one
// attention (the paged kernel) and row-invariant linear layers, so bf16 and unified FP8 runs
// agree to the LM head's rounding (bf16 decoding one or two sequences excepted: its matmuls stream
// their weights), while fp8-rollout (engine in FP8, trainer in bf16) shows the mismatch Jet-RL
// warns about.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "model/paged_attention.h"
#include "model/presets.h"
#include "rl/sequence_logprobs.h"

namespace trellis::rl {
namespace {

struct Rollouts {
  std::vector<Sequence> sequences;
  torch::Tensor behaviour;  // fp64 [tokens]
};

// 12 prompts x 4 completions of up to 24 tokens, decoded together at temperature 1.
Rollouts generate(model::Transformer& model, bool fp8, int64_t max_num_seqs = 256) {
  engine::Engine engine(model, {.max_num_seqs = max_num_seqs, .fp8 = fp8});
  std::vector<engine::Completion> done;
  for (int r = 0; r < 12; ++r) {
    engine::Request q;
    q.id = "r" + std::to_string(r);
    for (int i = 0; i < 5 + 3 * r; ++i) q.prompt.push_back((i * 37 + r * 11) % 250);
    q.n = std::min<int64_t>(4, max_num_seqs);
    q.max_tokens = 24;
    q.seed = 100 + r;
    q.sampling.temperature = 1.0;
    engine.add(q, {.on_finish = [&](engine::Completion c) { done.push_back(std::move(c)); }});
  }
  while (engine.has_work()) engine.step();
  Rollouts out;
  std::vector<float> behaviour;
  for (auto& c : done) {
    out.sequences.push_back({c.prompt, c.tokens, 1.0});
    behaviour.insert(behaviour.end(), c.logprobs.begin(), c.logprobs.end());
  }
  out.behaviour = torch::tensor(behaviour).to(torch::kFloat64);
  return out;
}

// Mean k3 = rho - 1 - log rho of rho = exp(trainer - behaviour): the trainer's mismatch metric.
double mismatch_k3(const torch::Tensor& trainer, const torch::Tensor& behaviour) {
  const auto d = trainer.detach().to(torch::kFloat64) - behaviour;
  return (torch::exp(d) - 1 - d).mean().item<double>();
}

struct Mismatch {
  double scoring;   // logp_old: the trainer's forward without autograd
  double training;  // logp: the forward the gradient flows through
};

Mismatch measure(model::Transformer& model, bool engine_fp8, bool trainer_fp8,
                 int64_t max_num_seqs = 256) {
  const Rollouts r = generate(model, engine_fp8, max_num_seqs);
  std::vector<const Sequence*> seqs;
  for (const auto& s : r.sequences) seqs.push_back(&s);
  const PackedSequences packed = pack_sequences(seqs);
  Mismatch m;
  {
    torch::NoGradGuard no_grad;
    m.scoring = mismatch_k3(sequence_logprobs(model, packed, 0, false, {.fp8 = trainer_fp8}).logp,
                            r.behaviour);
  }
  model.set_requires_grad(true);
  m.training = mismatch_k3(sequence_logprobs(model, packed, 0, false, {.fp8 = trainer_fp8}).logp,
                           r.behaviour);
  model.set_requires_grad(false);
  return m;
}

TEST(OnPolicy, TheTrainerScoresRolloutsWithTheEnginesNumbersInBf16AndUnifiedFp8) {
  auto config = model::preset_config(model::Arch::Qwen3, "tiny");
  model::Transformer model(config, {torch::kCPU, torch::kBFloat16});
  model.init_random(5);
  {
    // Sharper distributions than the random initialisation's near-uniform ones, so that the
    // log-probs (and the mismatch) are those of a model that prefers some tokens.
    torch::NoGradGuard no_grad;
    model.parameter("model.embed_tokens.weight").mul_(4);
  }
  const auto q = torch::zeros({1, config.num_attention_heads, config.head_dim}, torch::kBFloat16);
  if (!model::paged_kernel_supports(q))
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the engine and the trainer share no bf16 kernel";

  // Rollouts decoded 48 at a time, then one at a time.
  for (const int64_t decoding : {256, 1}) {
    SCOPED_TRACE("engine.max_num_seqs = " + std::to_string(decoding));
    const Mismatch bf16 = measure(model, false, false, decoding);
    const Mismatch fp8 = measure(model, true, true, decoding);
    const Mismatch fp8_rollout = measure(model, true, false, decoding);
    std::printf(
        "max_num_seqs %ld: mismatch/k3 bf16 %.2e (training forward %.2e), fp8 %.2e (%.2e), "
        "fp8-rollout %.2e\n",
        decoding, bf16.scoring, bf16.training, fp8.scoring, fp8.training, fp8_rollout.scoring);
    // Unified FP8: only the LM head's rounding is left (|log-prob difference| ~1e-6, k3 ~1e-14).
    EXPECT_LT(fp8.scoring, 1e-10);
    EXPECT_LT(fp8.training, 1e-10);
    if (decoding > 2) {
      EXPECT_LT(bf16.scoring, 1e-10);
      EXPECT_LT(bf16.training, 1e-10);
    } else {
      // Decoding one or two sequences, bf16 matmuls stream their weights (fused::skinny_linear),
      // which rounds differently from the GEMM library: close, not exact.
      EXPECT_LT(bf16.scoring, 1e-5);
    }
    // Two forward graphs: FP8 rollouts scored by a bf16 trainer.
    EXPECT_GT(fp8_rollout.scoring, 1e-6);
  }
}

}  // namespace
}  // namespace trellis::rl
