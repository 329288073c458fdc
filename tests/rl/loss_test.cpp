// The policy loss against a naive reference written here in plain double loops from specs/rl.md §3
// (value, the gradient with respect to each logp_t and each H_t derived by hand, and the clip /
// mask counts) on random inputs that visit every clipping and IcePop regime, for every combination
// of mismatch correction, normalisation, delta, KL and entropy; then exact cases: IcePop's
// inclusive band edges (bounds set exactly at a float rho and one double above or below it), TIS
// capping, the denominators (masked tokens stay in, sequence and constant weights, micro-batches
// summing to the whole batch), detached inputs, token_weights, validate() and the parsers.
#include "rl/loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "error_of.h"

namespace trellis::rl {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// The reference.

struct Case {
  std::vector<int64_t> lengths;
  int64_t max_len = 0;
  std::vector<float> logp, logp_old, logp_behav, adv, logp_ref, entropy;
};

struct Ref {
  double loss = 0;
  double scale = 0;  // sum of |terms| of the loss, for the tolerance
  std::vector<double> grad_logp, grad_entropy;
  std::vector<double> grad_scale;  // per token, sum of |terms| of the gradient
  double clip_low = 0, clip_high = 0, clip_delta = 0, masked_low = 0, masked_high = 0;
  double in_band = 0, mismatch_k3 = 0, entropy = 0, kl = 0;
};

// Counts exactly; sums to a relative 1e-5.
void expect_same_stats(const LossStats& got, const LossStats& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.clip_low, want.clip_low);
  EXPECT_EQ(got.clip_high, want.clip_high);
  EXPECT_EQ(got.clip_delta, want.clip_delta);
  EXPECT_EQ(got.masked_low, want.masked_low);
  EXPECT_EQ(got.masked_high, want.masked_high);
  EXPECT_NEAR(got.mismatch_k3, want.mismatch_k3, 1e-5 * want.mismatch_k3);
  EXPECT_NEAR(got.entropy, want.entropy, 1e-5 * want.entropy);
  EXPECT_NEAR(got.kl, want.kl, 1e-5 * want.kl);
}

Ref reference(const LossConfig& c, const Case& x, const std::vector<float>& w,
              const std::vector<float>& m) {
  const size_t n = x.logp.size();
  Ref ref;
  ref.grad_logp.assign(n, 0.0);
  ref.grad_entropy.assign(n, 0.0);
  ref.grad_scale.assign(n, 0.0);
  const double eps = c.clip_eps, delta = c.clip_delta;
  for (size_t t = 0; t < n; ++t) {
    const double lp = x.logp[t], lo = x.logp_old[t], lb = x.logp_behav[t], a = x.adv[t];
    const double r = std::exp(lp - lo);
    const double rho = std::exp(lo - lb);

    // J = min(min(r, delta) A, clip(r, 1-eps, 1+eps) A); dJ/dr from the branch that is smaller.
    const double unclipped = std::min(r, delta) * a;
    const double clipped = std::min(std::max(r, 1 - eps), 1 + eps) * a;
    double j = 0, dj_dr = 0;
    if (unclipped <= clipped) {
      j = unclipped;
      dj_dr = r < delta ? a : 0;
    } else {
      j = clipped;
      dj_dr = (r > 1 - eps && r < 1 + eps) ? a : 0;
    }
    const bool kept = rho >= c.icepop_low && rho <= c.icepop_high;
    double weight = 1;
    if (c.mismatch == Mismatch::IcePop) weight = kept ? rho : 0;
    if (c.mismatch == Mismatch::Tis) weight = std::min(rho, c.tis_cap);

    // dr/dlogp = r.
    ref.loss += -w[t] * weight * j;
    ref.scale += std::abs(w[t] * weight * j);
    ref.grad_logp[t] += -w[t] * weight * dj_dr * r;
    ref.grad_scale[t] += std::abs(w[t] * weight * dj_dr * r);

    if (c.kl_coef > 0) {
      const double d = x.logp_ref[t] - lp;
      const double k3 = std::exp(d) - d - 1;
      ref.loss += c.kl_coef * m[t] * k3;
      ref.scale += c.kl_coef * m[t] * (std::exp(d) + std::abs(d) + 1);
      ref.grad_logp[t] += c.kl_coef * m[t] * (1 - std::exp(d));   // d k3 / d logp
      ref.grad_scale[t] += c.kl_coef * m[t] * (std::exp(d) + 1);  // the float sum cancels
      ref.kl += k3;
    }
    if (c.entropy_coef > 0) {
      ref.loss -= c.entropy_coef * m[t] * x.entropy[t];
      ref.scale += std::abs(c.entropy_coef * m[t] * x.entropy[t]);
      ref.grad_entropy[t] = -c.entropy_coef * m[t];
    }
    ref.entropy += x.entropy[t];

    ref.clip_low += (a < 0 && r < 1 - eps);
    ref.clip_high += (a > 0 && r > 1 + eps);
    ref.clip_delta += (a < 0 && r > delta);
    ref.masked_low += rho < c.icepop_low;
    ref.masked_high += rho > c.icepop_high;
    ref.in_band += kept;
    ref.mismatch_k3 += rho - 1 - std::log(rho);
  }
  return ref;
}

// ---------------------------------------------------------------------------------------------
// Random inputs. Ratios are drawn per token from each regime with margins around every boundary
// (eps = 0.2, delta = 4, IcePop [0.5, 5], TIS cap 2), so that float rounding cannot move a token
// across one and the counts must agree exactly.

float uniform(std::mt19937& rng, double lo, double hi) {
  return static_cast<float>(std::uniform_real_distribution<double>(lo, hi)(rng));
}

Case random_case(std::mt19937& rng) {
  Case x;
  x.max_len = 16;
  const int sequences = 8;
  for (int i = 0; i < sequences; ++i) {
    const int64_t len = std::uniform_int_distribution<int64_t>(1, x.max_len)(rng);
    x.lengths.push_back(len);
    // One advantage per completion: negative, zero or positive.
    const int kind = std::uniform_int_distribution<int>(0, 5)(rng);
    const float a = kind == 0 ? 0.0f : (kind % 2 ? -1.0f : 1.0f) * uniform(rng, 0.1, 2.0);
    for (int64_t t = 0; t < len; ++t) {
      static const double r_bands[][2] = {
          {0.3, 0.78}, {0.82, 1.18}, {1.22, 1.9}, {2.1, 3.9}, {4.1, 9.0}};
      static const double rho_bands[][2] = {
          {0.05, 0.48}, {0.52, 0.98}, {1.02, 1.9}, {2.1, 4.9}, {5.2, 30.0}};
      const auto* rb = r_bands[std::uniform_int_distribution<int>(0, 4)(rng)];
      const auto* pb = rho_bands[std::uniform_int_distribution<int>(0, 4)(rng)];
      const float lo = uniform(rng, -8, -2.5);
      const float lp = lo + static_cast<float>(std::log(uniform(rng, rb[0], rb[1])));
      const float lb = lo - static_cast<float>(std::log(uniform(rng, pb[0], pb[1])));
      x.logp_old.push_back(lo);
      x.logp.push_back(lp);
      x.logp_behav.push_back(lb);
      x.adv.push_back(a);
      x.logp_ref.push_back(lp + uniform(rng, -1.5, 1.5));
      x.entropy.push_back(uniform(rng, 0.0, 3.0));
    }
  }
  return x;
}

torch::Tensor tensor(const std::vector<float>& v) { return torch::tensor(v, torch::kFloat); }

struct LossRun {
  LossResult result;
  torch::Tensor logp, entropy;  // the leaves, with .grad() after backward
};

// Calls policy_loss on tokens [begin, end) of x with the given weights, and backpropagates.
LossRun run_loss(const LossConfig& c, const Case& x, const std::vector<float>& w,
                 const std::vector<float>& m, int64_t begin = 0, int64_t end = -1,
                 bool with_entropy = true) {
  if (end < 0) end = static_cast<int64_t>(x.logp.size());
  const auto slice = [&](const std::vector<float>& v) {
    return tensor(std::vector<float>(v.begin() + begin, v.begin() + end));
  };
  LossRun run;
  run.logp = slice(x.logp).requires_grad_(true);
  LossInputs in;
  in.logp = run.logp;
  in.logp_old = slice(x.logp_old);
  in.logp_behav = slice(x.logp_behav);
  in.advantages = slice(x.adv);
  in.weights = slice(w);
  in.mean_weights = slice(m);
  if (c.kl_coef > 0) in.logp_ref = slice(x.logp_ref);
  if (with_entropy) {
    run.entropy = slice(x.entropy).requires_grad_(c.entropy_coef > 0);
    in.entropy = run.entropy;
  }
  run.result = policy_loss(c, in);
  if (run.result.loss.requires_grad()) run.result.loss.backward();
  return run;
}

const char* name(Mismatch m) {
  return m == Mismatch::None ? "none" : m == Mismatch::IcePop ? "icepop" : "tis";
}
const char* name(LossNorm n) {
  return n == LossNorm::Token ? "token" : n == LossNorm::Sequence ? "sequence" : "constant";
}

TEST(LossTest, MatchesNaiveReferenceForEveryOptionCombination) {
  int combos = 0;
  for (const auto mismatch : {Mismatch::None, Mismatch::IcePop, Mismatch::Tis}) {
    for (const auto norm : {LossNorm::Token, LossNorm::Sequence, LossNorm::Constant}) {
      for (const double delta : {4.0, kInf}) {
        for (const double kl : {0.0, 0.05}) {
          for (const double ent : {0.0, 0.01}) {
            LossConfig c;
            c.mismatch = mismatch;
            c.norm = norm;
            c.clip_delta = delta;
            c.kl_coef = kl;
            c.entropy_coef = ent;
            validate(c);
            ++combos;
            const std::string label = fmt::format("mismatch={} norm={} delta={} kl={} entropy={}",
                                                  name(mismatch), name(norm), delta, kl, ent);
            std::mt19937 rng(1234 + combos);
            Ref total;
            for (int rep = 0; rep < 4; ++rep) {
              const Case x = random_case(rng);
              const auto tw = token_weights(norm, x.lengths, x.max_len);
              const Ref ref = reference(c, x, tw.weights, tw.mean_weights);
              const LossRun run = run_loss(c, x, tw.weights, tw.mean_weights);
              SCOPED_TRACE(label + fmt::format(" rep={}", rep));

              const double loss = run.result.loss.item<double>();
              EXPECT_NEAR(loss, ref.loss, 1e-5 * ref.scale + 1e-12);
              ASSERT_TRUE(run.logp.grad().defined());
              const auto g = run.logp.grad().contiguous();
              for (size_t t = 0; t < x.logp.size(); ++t) {
                const double got = g[t].item<double>();
                EXPECT_NEAR(got, ref.grad_logp[t], 1e-5 * ref.grad_scale[t] + 1e-12)
                    << "token " << t;
              }
              if (ent > 0) {
                ASSERT_TRUE(run.entropy.grad().defined());
                const auto ge = run.entropy.grad().contiguous();
                for (size_t t = 0; t < x.logp.size(); ++t)
                  EXPECT_NEAR(ge[t].item<double>(), ref.grad_entropy[t],
                              1e-6 * std::abs(ref.grad_entropy[t]));
              }

              // (kl is 0 when KL is off.)
              expect_same_stats(
                  run.result.stats,
                  {static_cast<double>(x.logp.size()), ref.clip_low, ref.clip_high, ref.clip_delta,
                   ref.masked_low, ref.masked_high, ref.mismatch_k3, ref.entropy, ref.kl});
              total.clip_low += ref.clip_low;
              total.clip_high += ref.clip_high;
              total.clip_delta += ref.clip_delta;
              total.masked_low += ref.masked_low;
              total.masked_high += ref.masked_high;
              total.in_band += ref.in_band;
            }
            // Every regime was visited (delta only clips when finite).
            EXPECT_GT(total.clip_low, 0) << label;
            EXPECT_GT(total.clip_high, 0) << label;
            EXPECT_EQ(total.clip_delta > 0, std::isfinite(delta)) << label;
            EXPECT_GT(total.masked_low, 0) << label;
            EXPECT_GT(total.masked_high, 0) << label;
            EXPECT_GT(total.in_band, 0) << label;
          }
        }
      }
    }
  }
  EXPECT_EQ(combos, 72);
}

TEST(LossTest, RandomInputsVisitEveryRegimeOfTheObjective) {
  // The reference comparisons above only mean something if every branch of J occurs: for A > 0,
  // r inside the band (gradient), above 1+eps (clipped, no gradient); for A < 0, r below 1-eps
  // (clipped), above 1+eps but below delta (gradient: the dual-clip region), above delta (none).
  std::mt19937 rng(99);
  int pos_in = 0, pos_above = 0, pos_below = 0, neg_below = 0, neg_mid = 0, neg_above_delta = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const Case x = random_case(rng);
    for (size_t t = 0; t < x.logp.size(); ++t) {
      const double r = std::exp(static_cast<double>(x.logp[t]) - x.logp_old[t]);
      if (x.adv[t] > 0) {
        pos_in += r > 0.8 && r < 1.2;
        pos_above += r > 1.2;
        pos_below += r < 0.8;
      } else if (x.adv[t] < 0) {
        neg_below += r < 0.8;
        neg_mid += r > 1.2 && r < 4;
        neg_above_delta += r > 4;
      }
    }
  }
  EXPECT_GT(pos_in, 0);
  EXPECT_GT(pos_above, 0);
  EXPECT_GT(pos_below, 0);
  EXPECT_GT(neg_below, 0);
  EXPECT_GT(neg_mid, 0);
  EXPECT_GT(neg_above_delta, 0);
}

// ---------------------------------------------------------------------------------------------
// Exact single-token cases: r = 1 (logp == logp_old), A = 1, w = 1, so the loss is exactly
// -weight(rho) where rho = exp(logp_old - logp_behav) with logp_behav = 0.

// Every token here is its own one-element tensor, so rho below is computed by the same kernel
// path as inside policy_loss.
float rho_of(float logp_old) {
  return torch::exp(tensor({logp_old}) - tensor({0.0f})).item<float>();
}

double single_token_loss(const LossConfig& c, float logp_old, LossStats* stats = nullptr) {
  LossInputs in;
  in.logp = tensor({logp_old}).requires_grad_(true);
  in.logp_old = tensor({logp_old});
  in.logp_behav = tensor({0.0f});
  in.advantages = tensor({1.0f});
  in.weights = tensor({1.0f});
  in.mean_weights = tensor({1.0f});
  const auto result = policy_loss(c, in);
  if (stats) *stats = result.stats;
  return result.loss.item<double>();
}

// A float x with exp(x) == target exactly as policy_loss computes it.
float exact_log(float target) {
  float lo = std::log(target), hi = lo;
  for (int i = 0; i < 1000; ++i) {
    if (rho_of(lo) == target) return lo;
    if (rho_of(hi) == target) return hi;
    lo = std::nextafter(lo, -std::numeric_limits<float>::infinity());
    hi = std::nextafter(hi, std::numeric_limits<float>::infinity());
  }
  ADD_FAILURE() << "no float x with exp(x) == " << target;
  return std::log(target);
}

TEST(LossTest, IcePopKeepsRhoExactlyAtTheDefaultBandEdges) {
  LossConfig c;  // icepop, [0.5, 5]
  ASSERT_EQ(c.mismatch, Mismatch::IcePop);
  ASSERT_EQ(c.icepop_low, 0.5);
  ASSERT_EQ(c.icepop_high, 5.0);
  LossStats s;
  EXPECT_EQ(single_token_loss(c, exact_log(0.5f), &s), -0.5);
  EXPECT_EQ(s.masked_low, 0);
  EXPECT_EQ(single_token_loss(c, exact_log(5.0f), &s), -5.0);
  EXPECT_EQ(s.masked_high, 0);
  EXPECT_EQ(single_token_loss(c, 0.0f, &s), -1.0);  // rho = 1

  // The neighbouring floats outside the band are masked (weight 0) and counted.
  const float below = std::nextafter(0.5f, 0.0f);
  const float above = std::nextafter(5.0f, 10.0f);
  float x_below = exact_log(0.5f), x_above = exact_log(5.0f);
  while (rho_of(x_below) >= 0.5f) x_below = std::nextafter(x_below, -1.0f);
  while (rho_of(x_above) <= 5.0f) x_above = std::nextafter(x_above, 10.0f);
  EXPECT_LE(rho_of(x_below), below);
  EXPECT_GE(rho_of(x_above), above);
  EXPECT_EQ(single_token_loss(c, x_below, &s), 0.0);
  EXPECT_EQ(s.masked_low, 1);
  EXPECT_EQ(s.masked_high, 0);
  EXPECT_EQ(single_token_loss(c, x_above, &s), 0.0);
  EXPECT_EQ(s.masked_high, 1);
  EXPECT_EQ(s.masked_low, 0);
}

TEST(LossTest, IcePopBandIsInclusiveAtBoundsSetExactlyOnRho) {
  // For many rho, put a bound exactly on the (float) rho: kept with weight rho. Move the bound by
  // one double past it: masked. This holds for bounds that are not floats themselves.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const float x = uniform(rng, -3.0, 3.0);
    const float rho = rho_of(x);
    LossConfig c;
    LossStats s;
    if (rho < 1) {
      c.icepop_low = rho;
      EXPECT_EQ(single_token_loss(c, x, &s), -static_cast<double>(rho)) << x;
      EXPECT_EQ(s.masked_low, 0);
      c.icepop_low = std::nextafter(static_cast<double>(rho), 2.0);
      EXPECT_EQ(single_token_loss(c, x, &s), 0.0) << x;
      EXPECT_EQ(s.masked_low, 1);
    } else if (rho > 1) {
      c.icepop_high = rho;
      EXPECT_EQ(single_token_loss(c, x, &s), -static_cast<double>(rho)) << x;
      EXPECT_EQ(s.masked_high, 0);
      c.icepop_high = std::nextafter(static_cast<double>(rho), 0.0);
      EXPECT_EQ(single_token_loss(c, x, &s), 0.0) << x;
      EXPECT_EQ(s.masked_high, 1);
    }
  }
  // A zero-width band [1, 1] keeps rho = 1 exactly.
  LossConfig c;
  c.icepop_low = c.icepop_high = 1;
  validate(c);
  EXPECT_EQ(single_token_loss(c, 0.0f), -1.0);
}

TEST(LossTest, TisWeightIsRhoCappedAtC) {
  LossConfig c;
  c.mismatch = Mismatch::Tis;  // cap 2
  EXPECT_EQ(single_token_loss(c, exact_log(0.5f)), -0.5);
  EXPECT_EQ(single_token_loss(c, exact_log(2.0f)), -2.0);
  EXPECT_EQ(single_token_loss(c, exact_log(4.0f)), -2.0);
  EXPECT_EQ(single_token_loss(c, exact_log(0.125f)), -0.125);  // below IcePop's band: not masked
  c.mismatch = Mismatch::None;
  EXPECT_EQ(single_token_loss(c, exact_log(0.125f)), -1.0);
  EXPECT_EQ(single_token_loss(c, exact_log(8.0f)), -1.0);
}

TEST(LossTest, MismatchStatsAreCountedInEveryMode) {
  for (const auto mode : {Mismatch::None, Mismatch::IcePop, Mismatch::Tis}) {
    LossConfig c;
    c.mismatch = mode;
    LossStats s;
    single_token_loss(c, exact_log(0.125f), &s);
    EXPECT_EQ(s.masked_low, 1);
    EXPECT_NEAR(s.mismatch_k3, 0.125 - 1 - std::log(0.125), 1e-6);
    single_token_loss(c, exact_log(8.0f), &s);
    EXPECT_EQ(s.masked_high, 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Denominators.

// Tokens with r = 1 and A = 1 (J = 1); rho = 1 for `kept` tokens, e^-3 (below IcePop's band)
// otherwise.
Case flat_case(const std::vector<int64_t>& lengths, const std::vector<bool>& kept,
               int64_t max_len = 16) {
  Case x;
  x.lengths = lengths;
  x.max_len = max_len;
  for (const bool k : kept) {
    x.logp.push_back(-1.0f);
    x.logp_old.push_back(-1.0f);
    x.logp_behav.push_back(k ? -1.0f : 2.0f);
    x.adv.push_back(1.0f);
    x.logp_ref.push_back(-1.0f);
    x.entropy.push_back(0.0f);
  }
  return x;
}

TEST(LossTest, MaskedTokensStayInTheTokenDenominator) {
  // Two completions of 4 tokens; IcePop masks the second. Token norm: -(4 * 1/8) = -0.5, not the
  // -1 that dropping the masked tokens from the denominator would give.
  const auto x = flat_case({4, 4}, {true, true, true, true, false, false, false, false});
  LossConfig c;
  const auto tw = token_weights(LossNorm::Token, x.lengths, x.max_len);
  const auto run = run_loss(c, x, tw.weights, tw.mean_weights);
  EXPECT_FLOAT_EQ(run.result.loss.item<float>(), -0.5f);
  EXPECT_EQ(run.result.stats.masked_low, 4);
  EXPECT_EQ(run.result.stats.tokens, 8);
  // The same with the masked tokens interleaved, and under sequence normalisation.
  const auto y = flat_case({4, 4}, {true, false, true, false, false, true, false, true});
  EXPECT_FLOAT_EQ(run_loss(c, y, tw.weights, tw.mean_weights).result.loss.item<float>(), -0.5f);
  const auto sw = token_weights(LossNorm::Sequence, x.lengths, x.max_len);
  EXPECT_FLOAT_EQ(run_loss(c, x, sw.weights, sw.mean_weights).result.loss.item<float>(), -0.5f);
  // Gradients of the masked tokens are zero; the kept ones get -w * rho * A * r = -1/8.
  const auto g = run.logp.grad();
  for (int t = 0; t < 8; ++t) EXPECT_FLOAT_EQ(g[t].item<float>(), t < 4 ? -0.125f : 0.0f);
}

TEST(LossTest, SequenceNormWeighsEachSequenceEqually) {
  // Lengths 1 and 9: each completion contributes -1/2 whatever its length.
  LossConfig c;
  c.mismatch = Mismatch::None;
  const auto x = flat_case({1, 9}, std::vector<bool>(10, true));
  const auto sw = token_weights(LossNorm::Sequence, x.lengths, x.max_len);
  EXPECT_FLOAT_EQ(run_loss(c, x, sw.weights, sw.mean_weights).result.loss.item<float>(), -1.0f);
  EXPECT_FLOAT_EQ(run_loss(c, x, sw.weights, sw.mean_weights, 0, 1).result.loss.item<float>(),
                  -0.5f);
  EXPECT_FLOAT_EQ(run_loss(c, x, sw.weights, sw.mean_weights, 1, 10).result.loss.item<float>(),
                  -0.5f);
  // Token norm instead: 1/10 and 9/10.
  const auto tw = token_weights(LossNorm::Token, x.lengths, x.max_len);
  EXPECT_FLOAT_EQ(run_loss(c, x, tw.weights, tw.mean_weights, 0, 1).result.loss.item<float>(),
                  -0.1f);
  // Constant norm: N = S * max_len = 2 * 16.
  const auto cw = token_weights(LossNorm::Constant, x.lengths, x.max_len);
  EXPECT_FLOAT_EQ(run_loss(c, x, cw.weights, cw.mean_weights).result.loss.item<float>(),
                  -10.0f / 32);
}

TEST(LossTest, MicroBatchesSumToTheWholeBatch) {
  for (const auto norm : {LossNorm::Token, LossNorm::Sequence, LossNorm::Constant}) {
    for (const auto mismatch : {Mismatch::None, Mismatch::IcePop, Mismatch::Tis}) {
      SCOPED_TRACE(fmt::format("norm={} mismatch={}", name(norm), name(mismatch)));
      LossConfig c;
      c.norm = norm;
      c.mismatch = mismatch;
      c.kl_coef = 0.05;
      c.entropy_coef = 0.01;
      std::mt19937 rng(
          static_cast<unsigned>(static_cast<int>(norm) * 3 + static_cast<int>(mismatch)));
      const Case x = random_case(rng);
      const auto tw = token_weights(norm, x.lengths, x.max_len);
      const auto whole = run_loss(c, x, tw.weights, tw.mean_weights);
      // Split after the third completion.
      int64_t cut = 0;
      for (int i = 0; i < 3; ++i) cut += x.lengths[i];
      const int64_t n = static_cast<int64_t>(x.logp.size());
      const auto first = run_loss(c, x, tw.weights, tw.mean_weights, 0, cut);
      const auto second = run_loss(c, x, tw.weights, tw.mean_weights, cut, n);
      const double whole_loss = whole.result.loss.item<double>();
      EXPECT_NEAR(first.result.loss.item<double>() + second.result.loss.item<double>(), whole_loss,
                  1e-6 * std::abs(whole_loss) + 1e-7);
      const auto g = torch::cat({first.logp.grad(), second.logp.grad()});
      EXPECT_TRUE(torch::allclose(g, whole.logp.grad(), 1e-6, 1e-9));
      const auto ge = torch::cat({first.entropy.grad(), second.entropy.grad()});
      EXPECT_TRUE(torch::allclose(ge, whole.entropy.grad(), 1e-6, 1e-9));
      LossStats sum = first.result.stats;
      sum += second.result.stats;
      expect_same_stats(sum, whole.result.stats);
    }
  }
}

TEST(LossTest, TokenWeightsFollowTheNorm) {
  const std::vector<int64_t> lengths{3, 1, 6};
  const auto token = token_weights(LossNorm::Token, lengths, 8);
  const auto seq = token_weights(LossNorm::Sequence, lengths, 8);
  const auto constant = token_weights(LossNorm::Constant, lengths, 8);
  ASSERT_EQ(token.weights.size(), 10u);
  ASSERT_EQ(seq.weights.size(), 10u);
  ASSERT_EQ(constant.weights.size(), 10u);
  const std::vector<double> seq_want{1.0 / 9,  1.0 / 9,  1.0 / 9,  1.0 / 3,  1.0 / 18,
                                     1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18};
  for (size_t t = 0; t < 10; ++t) {
    EXPECT_EQ(token.weights[t], static_cast<float>(1.0 / 10));
    EXPECT_EQ(seq.weights[t], static_cast<float>(seq_want[t]));
    EXPECT_EQ(constant.weights[t], static_cast<float>(1.0 / 24));
    for (const auto* tw : {&token, &seq, &constant})
      EXPECT_EQ(tw->mean_weights[t], static_cast<float>(1.0 / 10));
  }
  EXPECT_TRUE(token_weights(LossNorm::Token, {}, 8).weights.empty());
  // Lengths past max_len matter only to constant normalisation.
  EXPECT_EQ(token_weights(LossNorm::Token, {9}, 8).weights.size(), 9u);
}

TEST(LossTest, TokenWeightsRejectBadLengths) {
  for (const auto norm : {LossNorm::Token, LossNorm::Sequence, LossNorm::Constant}) {
    const auto msg = test::error_of([&] { token_weights(norm, {2, 0, 3}, 8); });
    EXPECT_NE(msg.find("completion 1"), std::string::npos) << msg;
    EXPECT_NE(test::error_of([&] { token_weights(norm, {2, -1}, 8); }), "");
  }
  const auto too_long = test::error_of([&] { token_weights(LossNorm::Constant, {2, 9}, 8); });
  EXPECT_NE(too_long.find("max_len"), std::string::npos) << too_long;
  EXPECT_NE(test::error_of([&] { token_weights(LossNorm::Constant, {2}, 0); }), "");
  EXPECT_NE(test::error_of([&] { token_weights(LossNorm::Constant, {}, -1); }), "");
}

// ---------------------------------------------------------------------------------------------
// Gradient flow and inputs.

TEST(LossTest, OnlyLogpAndEntropyGetGradients) {
  // rho, the IcePop mask / TIS weight, logp_old, the advantages, weights and logp_ref are
  // constants: even inputs that require grad receive none.
  for (const auto mismatch : {Mismatch::None, Mismatch::IcePop, Mismatch::Tis}) {
    std::mt19937 rng(5);
    const Case x = random_case(rng);
    const auto tw = token_weights(LossNorm::Token, x.lengths, x.max_len);
    LossConfig c;
    c.mismatch = mismatch;
    c.kl_coef = 0.1;
    c.entropy_coef = 0.1;
    LossInputs in;
    in.logp = tensor(x.logp).requires_grad_(true);
    in.logp_old = tensor(x.logp_old).requires_grad_(true);
    in.logp_behav = tensor(x.logp_behav).requires_grad_(true);
    in.advantages = tensor(x.adv).requires_grad_(true);
    in.weights = tensor(tw.weights).requires_grad_(true);
    in.mean_weights = tensor(tw.mean_weights).requires_grad_(true);
    in.logp_ref = tensor(x.logp_ref).requires_grad_(true);
    in.entropy = tensor(x.entropy).requires_grad_(true);
    auto result = policy_loss(c, in);
    result.loss.backward();
    EXPECT_TRUE(in.logp.grad().defined());
    EXPECT_TRUE(in.entropy.grad().defined());
    for (const auto* t : {&in.logp_old, &in.logp_behav, &in.advantages, &in.weights,
                          &in.mean_weights, &in.logp_ref}) {
      EXPECT_FALSE(t->grad().defined() && t->grad().abs().sum().item<double>() != 0)
          << name(mismatch);
    }
  }
}

TEST(LossTest, EntropyWithZeroCoefficientIsReportedButNotOptimised) {
  std::mt19937 rng(11);
  const Case x = random_case(rng);
  const auto tw = token_weights(LossNorm::Token, x.lengths, x.max_len);
  LossConfig c;
  const auto with = run_loss(c, x, tw.weights, tw.mean_weights);
  const auto without = run_loss(c, x, tw.weights, tw.mean_weights, 0, -1, /*with_entropy=*/false);
  const Ref ref = reference(c, x, tw.weights, tw.mean_weights);
  EXPECT_NEAR(with.result.stats.entropy, ref.entropy, 1e-5 * ref.entropy);
  EXPECT_EQ(without.result.stats.entropy, 0);
  EXPECT_EQ(with.result.loss.item<float>(), without.result.loss.item<float>());
  EXPECT_EQ(with.result.stats.kl, 0);
}

TEST(LossTest, MissingOrMisshapenInputsAreErrors) {
  const auto x = flat_case({2}, {true, true});
  const auto tw = token_weights(LossNorm::Token, x.lengths, x.max_len);
  const auto inputs = [&] {
    LossInputs in;
    in.logp = tensor(x.logp).requires_grad_(true);
    in.logp_old = tensor(x.logp_old);
    in.logp_behav = tensor(x.logp_behav);
    in.advantages = tensor(x.adv);
    in.weights = tensor(tw.weights);
    in.mean_weights = tensor(tw.mean_weights);
    return in;
  };
  LossConfig c;
  c.kl_coef = 0.1;
  const auto no_ref = test::error_of([&] { policy_loss(c, inputs()); });
  EXPECT_NE(no_ref.find("logp_ref"), std::string::npos) << no_ref;
  c.kl_coef = 0;
  c.entropy_coef = 0.1;
  const auto no_entropy = test::error_of([&] { policy_loss(c, inputs()); });
  EXPECT_NE(no_entropy.find("entropy"), std::string::npos) << no_entropy;
  c.entropy_coef = 0;
  EXPECT_EQ(test::error_of([&] { policy_loss(c, inputs()); }), "");
  const auto short_adv = test::error_of([&] {
    auto in = inputs();
    in.advantages = tensor({1.0f});
    policy_loss(c, in);
  });
  EXPECT_NE(short_adv.find("advantages"), std::string::npos) << short_adv;
  const auto no_weights = test::error_of([&] {
    auto in = inputs();
    in.weights = torch::Tensor();
    policy_loss(c, in);
  });
  EXPECT_NE(no_weights.find("weights"), std::string::npos) << no_weights;
  const auto matrix = test::error_of([&] {
    auto in = inputs();
    in.logp = torch::zeros({1, 2}, torch::kFloat).requires_grad_(true);
    policy_loss(c, in);
  });
  EXPECT_NE(matrix.find("logp must be 1-D"), std::string::npos) << matrix;
}

// ---------------------------------------------------------------------------------------------
// Configuration.

TEST(LossTest, ValidateAcceptsDefaultsAndPlainClipping) {
  LossConfig c;
  EXPECT_EQ(test::error_of([&] { validate(c); }), "");
  c.clip_delta = kInf;
  c.icepop_high = kInf;
  c.tis_cap = kInf;
  c.icepop_low = 0;
  c.kl_coef = 0.001;
  c.entropy_coef = 1e-4;
  EXPECT_EQ(test::error_of([&] { validate(c); }), "");
}

TEST(LossTest, ValidateNamesTheBadKey) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Bad {
    const char* key;
    double LossConfig::*field;
    std::vector<double> values;
  };
  const std::vector<Bad> cases = {
      {"loss.clip_eps", &LossConfig::clip_eps, {0, 1, -0.1, 1.5, nan}},
      {"loss.clip_delta", &LossConfig::clip_delta, {1.2, 1.0, 0.5, -kInf, nan}},
      {"loss.icepop_low", &LossConfig::icepop_low, {-0.1, 1.01, kInf, nan}},
      {"loss.icepop_high", &LossConfig::icepop_high, {0.99, 0, -1, nan}},
      {"loss.tis_cap", &LossConfig::tis_cap, {0.5, 0, -1, nan}},
      {"loss.kl_coef", &LossConfig::kl_coef, {-0.001, kInf, nan}},
      {"loss.entropy_coef", &LossConfig::entropy_coef, {-1e-4, kInf, nan}},
  };
  for (const auto& bad : cases) {
    for (const double v : bad.values) {
      LossConfig c;
      c.*bad.field = v;
      const auto msg = test::error_of([&] { validate(c); });
      EXPECT_NE(msg.find(bad.key), std::string::npos) << bad.key << " = " << v << ": " << msg;
    }
  }
  // delta must exceed 1 + eps for the configured eps.
  LossConfig c;
  c.clip_eps = 0.5;
  c.clip_delta = 1.4;
  EXPECT_NE(test::error_of([&] { validate(c); }).find("loss.clip_delta"), std::string::npos);
}

TEST(LossTest, ParseNamesAndErrors) {
  EXPECT_EQ(parse_mismatch("icepop", "x"), Mismatch::IcePop);
  EXPECT_EQ(parse_mismatch("tis", "x"), Mismatch::Tis);
  EXPECT_EQ(parse_mismatch("none", "x"), Mismatch::None);
  EXPECT_EQ(parse_norm("token", "x"), LossNorm::Token);
  EXPECT_EQ(parse_norm("sequence", "x"), LossNorm::Sequence);
  EXPECT_EQ(parse_norm("constant", "x"), LossNorm::Constant);
  const auto m = test::error_of([] { parse_mismatch("IcePop", "config.toml: loss.mismatch"); });
  for (const char* part : {"IcePop", "config.toml: loss.mismatch", "icepop", "tis", "none"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " in " << m;
  const auto n = test::error_of([] { parse_norm("seq", "--loss-norm"); });
  for (const char* part : {"seq", "--loss-norm", "token", "sequence", "constant"})
    EXPECT_NE(n.find(part), std::string::npos) << part << " in " << n;
}

TEST(LossTest, StatsAccumulate) {
  LossStats a{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const LossStats b{10, 20, 30, 40, 50, 60, 70, 80, 90};
  a += b;
  EXPECT_EQ(a.tokens, 11);
  EXPECT_EQ(a.clip_low, 22);
  EXPECT_EQ(a.clip_high, 33);
  EXPECT_EQ(a.clip_delta, 44);
  EXPECT_EQ(a.masked_low, 55);
  EXPECT_EQ(a.masked_high, 66);
  EXPECT_EQ(a.mismatch_k3, 77);
  EXPECT_EQ(a.entropy, 88);
  EXPECT_EQ(a.kl, 99);
}

}  // namespace
}  // namespace trellis::rl
