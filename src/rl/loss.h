// Loss: the GRPO-family policy objective of specs/rl.md §3 on per-token tensors.
//
// Per completion token t with r = exp(logp - logp_old), rho = exp(logp_old - logp_behav) and
// advantage A:
//   J = min( min(r, delta) * A, clip(r, 1 - eps, 1 + eps) * A )      (two-sided clipping)
//   J *= M(rho) = rho if icepop_low <= rho <= icepop_high else 0     (mismatch = icepop)
//   J *= min(rho, tis_cap)                                           (mismatch = tis)
// (rho is detached), and
//   loss = -sum_t w_t J_t + kl_coef * sum_t m_t k3_t - entropy_coef * sum_t m_t H_t
// with k3_t = exp(logp_ref - logp) - (logp_ref - logp) - 1. The weights come from the caller so
// that a batch split into micro-batches sums to the loss of the whole batch:
//   w_t (the normalisation): token 1/N, sequence 1/(len_i * S), constant 1/(S * max_len), where
//       N = completion tokens, S = sequences of the optimizer step (before any masking: tokens
//       that IcePop masks stay in the denominator);
//   m_t = 1/N (KL and entropy are token means).
// token_weights() computes both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace trellis::rl {

enum class Mismatch { None, IcePop, Tis };
enum class LossNorm { Token, Sequence, Constant };

struct LossConfig {
  double clip_eps = 0.2;    // ε: clip(r, 1-ε, 1+ε)
  double clip_delta = 4.0;  // δ: the upper bound on r for negative advantages; inf = plain PPO
  Mismatch mismatch = Mismatch::IcePop;
  double icepop_low = 0.5;   // α
  double icepop_high = 5.0;  // β
  double tis_cap = 2.0;      // C
  double kl_coef = 0.0;      // k3 KL to the reference; > 0 needs logp_ref
  double entropy_coef = 0.0;
  LossNorm norm = LossNorm::Token;
};

// Error naming the key (e.g. "loss.clip_delta") unless the values are usable: eps in (0, 1),
// delta > 1 + eps, 0 <= low <= 1 <= high, cap >= 1, coefficients >= 0.
void validate(const LossConfig& config);
Mismatch parse_mismatch(const std::string& name, const std::string& where);  // icepop | tis | none
LossNorm parse_norm(const std::string& name, const std::string& where);  // token|sequence|constant

// Inputs for the tokens of one micro-batch, all 1-D of the same length, fp32 (other floating types
// are converted). Only logp and entropy receive gradients; the rest are treated as constants.
// policy_loss throws Error for a missing or misshapen input.
struct LossInputs {
  torch::Tensor logp;        // with grad
  torch::Tensor logp_old;    // no grad
  torch::Tensor logp_behav;  // no grad
  torch::Tensor advantages;
  torch::Tensor weights;       // w_t
  torch::Tensor mean_weights;  // m_t
  torch::Tensor logp_ref;      // defined iff kl_coef > 0
  torch::Tensor entropy;       // full-distribution entropy H_t; with grad if entropy_coef > 0
};

// Sums over the micro-batch's tokens, for metrics: fractions are these over the token count of
// the whole step. Clipping counts follow where each clip is active (its gradient is zero):
// clip_low: A < 0 and r < 1-ε; clip_high: A > 0 and r > 1+ε; clip_delta: A < 0 and r > δ.
// masked_low / masked_high: rho < icepop_low / rho > icepop_high (counted whatever the mismatch
// mode, so that the mismatch is visible even without correction). mismatch_k3: sum of
// rho - 1 - log(rho) (the k3 estimate of KL(behaviour || old policy)). entropy: sum of H_t when
// `entropy` is given (whatever entropy_coef); kl: sum of k3_t when kl_coef > 0, else 0.
struct LossStats {
  double tokens = 0, clip_low = 0, clip_high = 0, clip_delta = 0, masked_low = 0, masked_high = 0,
         mismatch_k3 = 0, entropy = 0, kl = 0;
  LossStats& operator+=(const LossStats& o);
};

struct LossResult {
  torch::Tensor loss;  // scalar, with grad
  LossStats stats;
};

LossResult policy_loss(const LossConfig& config, const LossInputs& inputs);

// Per-token weights (w_t, m_t) for completions of the given lengths making up one optimizer step;
// `max_len` is the completion-length cap used by LossNorm::Constant. Concatenated in order.
struct TokenWeights {
  std::vector<float> weights, mean_weights;
};
TokenWeights token_weights(LossNorm norm, const std::vector<int64_t>& completion_lengths,
                           int64_t max_len);

}  // namespace trellis::rl
