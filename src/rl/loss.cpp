// The GRPO-family policy loss (see loss.h).
#include "rl/loss.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace trellis::rl {
namespace {

// The band test compares a float rho with double bounds; rounding a bound to float could move it
// past a rho, so these give the float thresholds that decide exactly as the double bounds do:
// rho >= at_least(x) iff double(rho) >= x, and rho <= at_most(x) iff double(rho) <= x.
double at_least(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) < x) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}
double at_most(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) > x) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

torch::Tensor as_float(const torch::Tensor& t) { return t.to(torch::kFloat); }

void check_input(const torch::Tensor& t, const char* name, int64_t n) {
  if (!t.defined()) fail("policy_loss", "{} is missing", name);
  if (t.dim() != 1 || t.size(0) != n)
    fail("policy_loss", "{} must be 1-D with {} elements (one per token), got shape {}", name, n,
         c10::str(t.sizes()));
}

}  // namespace

void validate(const LossConfig& c) {
  // Written as !(ok) so that NaN fails every check.
  if (!(c.clip_eps > 0 && c.clip_eps < 1))
    fail("loss.clip_eps", "clip_eps must be in (0, 1), got {}", c.clip_eps);
  if (!(c.clip_delta > 1 + c.clip_eps))
    fail("loss.clip_delta",
         "clip_delta must exceed 1 + clip_eps = {} (inf for plain clipping), got {}",
         1 + c.clip_eps, c.clip_delta);
  if (!(c.icepop_low >= 0 && c.icepop_low <= 1))
    fail("loss.icepop_low", "icepop_low must be in [0, 1], got {}", c.icepop_low);
  if (!(c.icepop_high >= 1))
    fail("loss.icepop_high", "icepop_high must be >= 1, got {}", c.icepop_high);
  if (!(c.tis_cap >= 1)) fail("loss.tis_cap", "tis_cap must be >= 1, got {}", c.tis_cap);
  if (!(c.kl_coef >= 0 && std::isfinite(c.kl_coef)))
    fail("loss.kl_coef", "kl_coef must be finite and >= 0, got {}", c.kl_coef);
  if (!(c.entropy_coef >= 0 && std::isfinite(c.entropy_coef)))
    fail("loss.entropy_coef", "entropy_coef must be finite and >= 0, got {}", c.entropy_coef);
}

Mismatch parse_mismatch(const std::string& name, const std::string& where) {
  if (name == "icepop") return Mismatch::IcePop;
  if (name == "tis") return Mismatch::Tis;
  if (name == "none") return Mismatch::None;
  fail(where, "unknown mismatch correction '{}' (expected icepop, tis or none)", name);
}

LossNorm parse_norm(const std::string& name, const std::string& where) {
  if (name == "token") return LossNorm::Token;
  if (name == "sequence") return LossNorm::Sequence;
  if (name == "constant") return LossNorm::Constant;
  fail(where, "unknown loss normalisation '{}' (expected token, sequence or constant)", name);
}

LossStats& LossStats::operator+=(const LossStats& o) {
  tokens += o.tokens;
  clip_low += o.clip_low;
  clip_high += o.clip_high;
  clip_delta += o.clip_delta;
  masked_low += o.masked_low;
  masked_high += o.masked_high;
  mismatch_k3 += o.mismatch_k3;
  entropy += o.entropy;
  kl += o.kl;
  return *this;
}

LossResult policy_loss(const LossConfig& config, const LossInputs& in) {
  if (!in.logp.defined()) fail("policy_loss", "logp is missing");
  if (in.logp.dim() != 1)
    fail("policy_loss", "logp must be 1-D (one entry per token), got shape {}",
         c10::str(in.logp.sizes()));
  const int64_t n = in.logp.size(0);
  check_input(in.logp_old, "logp_old", n);
  check_input(in.logp_behav, "logp_behav", n);
  check_input(in.advantages, "advantages", n);
  check_input(in.weights, "weights", n);
  check_input(in.mean_weights, "mean_weights", n);
  const bool use_kl = config.kl_coef > 0;
  const bool use_entropy = config.entropy_coef > 0;
  if (use_kl) check_input(in.logp_ref, "logp_ref (needed when loss.kl_coef > 0)", n);
  if (use_entropy) check_input(in.entropy, "entropy (needed when loss.entropy_coef > 0)", n);
  if (in.entropy.defined()) check_input(in.entropy, "entropy", n);

  const auto logp = as_float(in.logp);
  const auto logp_old = as_float(in.logp_old).detach();
  const auto adv = as_float(in.advantages).detach();
  const auto w = as_float(in.weights).detach();
  const auto m = as_float(in.mean_weights).detach();
  const double eps = config.clip_eps;
  const double delta = config.clip_delta;

  // Two-sided clipping. With delta = inf, clamp_max is the identity (gradient included).
  const auto r = torch::exp(logp - logp_old);
  const auto j =
      torch::min(torch::clamp_max(r, delta) * adv, torch::clamp(r, 1 - eps, 1 + eps) * adv);

  const auto rho = torch::exp(logp_old - as_float(in.logp_behav).detach()).detach();
  const auto in_low = rho >= at_least(config.icepop_low);
  const auto in_high = rho <= at_most(config.icepop_high);
  torch::Tensor objective = j;
  switch (config.mismatch) {
    case Mismatch::None:
      break;
    case Mismatch::IcePop:
      objective = j * torch::where(in_low & in_high, rho, torch::zeros_like(rho));
      break;
    case Mismatch::Tis:
      objective = j * torch::clamp_max(rho, config.tis_cap);
      break;
  }
  // Masked tokens keep their weight w_t: the denominator counts them.
  auto loss = -(w * objective).sum();

  torch::Tensor kl_sum, entropy_sum;
  if (use_kl) {
    const auto d = as_float(in.logp_ref).detach() - logp;
    const auto k3 = torch::exp(d) - d - 1;
    loss = loss + config.kl_coef * (m * k3).sum();
    kl_sum = k3.detach().sum();
  }
  if (in.entropy.defined()) {
    const auto h = as_float(in.entropy);
    if (use_entropy) loss = loss - config.entropy_coef * (m * h).sum();
    entropy_sum = h.detach().sum();
  }

  // One transfer for all the statistics.
  const auto rd = r.detach();
  const auto count = [](const torch::Tensor& b) { return b.sum().to(torch::kDouble); };
  const auto zero = torch::scalar_tensor(0.0, rho.options().dtype(torch::kDouble));
  const auto packed =
      torch::stack({count((adv < 0) & (rd < 1 - eps)), count((adv > 0) & (rd > 1 + eps)),
                    count((adv < 0) & (rd > delta)), count(in_low.logical_not()),
                    count(in_high.logical_not()),
                    (rho - 1 - torch::log(rho)).sum().to(torch::kDouble),
                    entropy_sum.defined() ? entropy_sum.to(torch::kDouble) : zero,
                    kl_sum.defined() ? kl_sum.to(torch::kDouble) : zero})
          .cpu();
  const auto* p = packed.data_ptr<double>();
  LossResult result;
  result.loss = loss;
  result.stats = {static_cast<double>(n), p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
  return result;
}

TokenWeights token_weights(LossNorm norm, const std::vector<int64_t>& completion_lengths,
                           int64_t max_len) {
  if (norm == LossNorm::Constant && max_len <= 0)
    fail("token_weights", "constant normalisation needs max_len > 0, got {}", max_len);
  int64_t total = 0;
  for (size_t i = 0; i < completion_lengths.size(); ++i) {
    const int64_t len = completion_lengths[i];
    if (len < 1) fail("token_weights", "completion {} has length {} (must be >= 1)", i, len);
    if (norm == LossNorm::Constant && len > max_len)
      fail("token_weights", "completion {} has length {}, more than max_len {}", i, len, max_len);
    total += len;
  }
  const double s = static_cast<double>(completion_lengths.size());
  TokenWeights out;
  out.weights.reserve(total);
  out.mean_weights.assign(total, static_cast<float>(1.0 / static_cast<double>(total)));
  for (const int64_t len : completion_lengths) {
    double wt = 0;
    switch (norm) {
      case LossNorm::Token:
        wt = 1.0 / static_cast<double>(total);
        break;
      case LossNorm::Sequence:
        wt = 1.0 / (static_cast<double>(len) * s);
        break;
      case LossNorm::Constant:
        wt = 1.0 / (s * static_cast<double>(max_len));
        break;
    }
    out.weights.insert(out.weights.end(), len, static_cast<float>(wt));
  }
  return out;
}

}  // namespace trellis::rl
