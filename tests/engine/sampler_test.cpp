// Verifiable sampling against a naive reference written here from the documented rules (long
// double softmax, an explicit ranking for top-k / top-p with ties to the lower id, inverse CDF over
// the kept ids in id order): sampled tokens, log-probs, u intervals and their partition of [0, 1),
// top log-probs, empirical frequencies under sampling_uniform, masked tokens, determinism, and the
// errors for bad parameters and bad rows.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/rng.h"

namespace trellis::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
const double kLastU = std::nextafter(1.0, 0.0);

// ---------------------------------------------------------------------------------------------
// The reference sampler.

// One row under one temperature (T = 0 means greedy, whose log-probs are taken at T = 1).
struct RefRow {
  std::vector<long double> prob;  // softmax(x / T)
  std::vector<long double> logp;  // log softmax(x / T)
  std::vector<int32_t> rank;      // ids by probability, descending, lower id first on ties
  int32_t argmax = 0;             // lowest id among the largest logits
};

RefRow ref_row(const std::vector<float>& x, double temperature) {
  const long double t = temperature == 0 ? 1.0L : static_cast<long double>(temperature);
  const auto n = static_cast<int32_t>(x.size());
  long double m = -std::numeric_limits<long double>::infinity();
  RefRow r;
  for (int32_t i = 0; i < n; ++i) {
    if (x[i] > m) {
      m = x[i];
      r.argmax = i;
    }
  }
  std::vector<long double> z(n);
  long double sum = 0;
  for (int32_t i = 0; i < n; ++i) {
    z[i] = (static_cast<long double>(x[i]) - m) / t;
    sum += std::exp(z[i]);
  }
  r.prob.resize(n);
  r.logp.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    r.prob[i] = std::exp(z[i]) / sum;
    r.logp[i] = z[i] - std::log(sum);
  }
  r.rank.resize(n);
  std::iota(r.rank.begin(), r.rank.end(), 0);
  std::stable_sort(r.rank.begin(), r.rank.end(),
                   [&](int32_t a, int32_t b) { return r.prob[a] > r.prob[b]; });
  return r;
}

// The kept ids in id order and the u interval [lo, hi) of each (normalised cumulative mass).
struct RefDist {
  std::vector<int32_t> kept;
  std::vector<long double> lo, hi;
  bool ambiguous = false;  // the top-p cut is within rounding of top_p: the kept set is not sharp
};

RefDist ref_dist(const RefRow& row, const SamplingParams& p) {
  RefDist d;
  const auto n = static_cast<int64_t>(row.prob.size());
  if (p.temperature == 0) {
    d.kept = {row.argmax};
    d.lo = {0};
    d.hi = {1};
    return d;
  }
  const int64_t k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
  int64_t count = k;
  if (p.top_p < 1) {
    long double mass_k = 0;
    for (int64_t j = 0; j < k; ++j) mass_k += row.prob[row.rank[j]];
    long double cum = 0;
    for (int64_t j = 0; j < k; ++j) {
      cum += row.prob[row.rank[j]] / mass_k;
      if (cum >= p.top_p) {
        count = j + 1;
        d.ambiguous = std::fabs(cum - p.top_p) < 1e-9L;
        break;
      }
    }
  }
  d.kept.assign(row.rank.begin(), row.rank.begin() + count);
  std::sort(d.kept.begin(), d.kept.end());
  long double mass = 0;
  for (int32_t id : d.kept) mass += row.prob[id];
  long double c = 0;
  for (int32_t id : d.kept) {
    d.lo.push_back(c / mass);
    c += row.prob[id];
    d.hi.push_back(c / mass);
  }
  d.hi.back() = 1;
  return d;
}

// Index into d.kept of the token u selects.
size_t ref_pick(const RefDist& d, double u) {
  for (size_t j = 0; j < d.kept.size(); ++j) {
    if (d.hi[j] > d.lo[j] && u < d.hi[j]) return j;
  }
  return d.kept.size() - 1;
}

// Distance from u to the nearest interval boundary strictly inside (0, 1).
long double boundary_distance(const RefDist& d, double u) {
  long double best = std::numeric_limits<long double>::infinity();
  for (size_t j = 0; j + 1 < d.kept.size(); ++j) best = std::min(best, std::fabs(u - d.hi[j]));
  return best;
}

// ---------------------------------------------------------------------------------------------
// Helpers.

constexpr long double kBoundaryTol = 1e-12L;

// Passes when f throws trellis::Error whose message contains every one of `parts`.
::testing::AssertionResult throws_error(const std::function<void()>& f,
                                        std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& part : parts) {
      if (msg.find(part) == std::string::npos) {
        return ::testing::AssertionFailure() << "'" << msg << "' lacks '" << part << "'";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-trellis::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

double logprob_tol(long double ref) {
  return 1e-5 * std::max(1.0, std::fabs(static_cast<double>(ref)));
}

enum class RowKind { Normal, Integers, Masked, Peaked };

std::vector<float> make_row(int64_t vocab, RowKind kind, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int> small_int(-3, 3);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<float> x(vocab);
  for (auto& v : x)
    v = kind == RowKind::Integers ? static_cast<float>(small_int(gen)) : normal(gen);
  if (kind == RowKind::Masked) {
    for (auto& v : x) {
      if (unit(gen) < 0.3) v = kNegInf;
    }
    x[gen() % vocab] = 1.0f;  // at least one finite logit
  }
  if (kind == RowKind::Peaked) {
    for (int i = 0; i < 6 && i < vocab; ++i) x[gen() % vocab] = 12.0f + static_cast<float>(i % 3);
    for (int i = 0; i < vocab / 50; ++i) x[gen() % vocab] = kNegInf;
  }
  return x;
}

struct Stats {
  int64_t samples = 0, boundary_disagreements = 0, ambiguous_skipped = 0;
};

// Checks sample_token against the reference at u, and that token_interval of the sampled token
// contains u.
void check_sample(const std::vector<float>& x, const SamplingParams& p, const RefRow& row,
                  const RefDist& d, double u, Stats& stats) {
  const auto vocab = static_cast<int64_t>(x.size());
  SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " T " << p.temperature << " top_k "
                                    << p.top_k << " top_p " << p.top_p << " u " << u);
  const Sample s = sample_token(x.data(), vocab, p, u);
  ++stats.samples;
  const size_t j = ref_pick(d, u);
  if (s.token != d.kept[j]) {
    // Only allowed right at a boundary, and then only for the token on the other side.
    ++stats.boundary_disagreements;
    ASSERT_LT(boundary_distance(d, u), kBoundaryTol)
        << "sampled " << s.token << ", reference " << d.kept[j];
    const auto it = std::find(d.kept.begin(), d.kept.end(), s.token);
    ASSERT_NE(it, d.kept.end()) << "sampled token " << s.token << " is not kept";
    const size_t i = it - d.kept.begin();
    EXPECT_GE(u, d.lo[i] - kBoundaryTol);
    EXPECT_LE(u, d.hi[i] + kBoundaryTol);
  }
  ASSERT_GE(s.token, 0);
  ASSERT_LT(s.token, vocab);
  EXPECT_NE(x[s.token], kNegInf) << "masked token sampled";
  EXPECT_NEAR(s.logprob, static_cast<double>(row.logp[s.token]), logprob_tol(row.logp[s.token]));
  const Interval iv = token_interval(x.data(), vocab, p, s.token);
  EXPECT_LE(iv.lo, u);
  EXPECT_LT(u, iv.hi);
}

// token_interval of every id: excluded ids empty; kept ids near the reference; the non-empty
// intervals in id order tile [0, 1) exactly (each starts where the previous one ends).
void check_partition(const std::vector<float>& x, const SamplingParams& p, const RefDist& d) {
  const auto vocab = static_cast<int64_t>(x.size());
  SCOPED_TRACE(::testing::Message() << "partition: vocab " << vocab << " T " << p.temperature
                                    << " top_k " << p.top_k << " top_p " << p.top_p);
  std::vector<int> slot(vocab, -1);
  for (size_t j = 0; j < d.kept.size(); ++j) slot[d.kept[j]] = static_cast<int>(j);
  double next = 0, width = 0;
  for (int32_t id = 0; id < vocab; ++id) {
    const Interval iv = token_interval(x.data(), vocab, p, id);
    ASSERT_LE(iv.lo, iv.hi) << "id " << id;
    if (slot[id] < 0 || d.hi[slot[id]] == d.lo[slot[id]]) {
      EXPECT_EQ(iv.lo, iv.hi) << "excluded id " << id << " has a non-empty interval";
      continue;
    }
    const int j = slot[id];
    // A kept token whose probability is below double resolution at its place in the CDF may get
    // an empty interval.
    if (iv.lo == iv.hi && d.hi[j] - d.lo[j] < kBoundaryTol) continue;
    EXPECT_NEAR(iv.lo, static_cast<double>(d.lo[j]), kBoundaryTol) << "id " << id;
    EXPECT_NEAR(iv.hi, static_cast<double>(d.hi[j]), kBoundaryTol) << "id " << id;
    EXPECT_EQ(iv.lo, next) << "gap or overlap before id " << id;
    next = iv.hi;
    width += iv.hi - iv.lo;
  }
  EXPECT_EQ(next, 1.0);
  EXPECT_NEAR(width, 1.0, 1e-12);
}

// The u values to try: the ends of [0, 1), random points, and points at and around the starts of
// some kept tokens' intervals (as token_interval reports them and as the reference has them).
std::vector<double> probe_us(const std::vector<float>& x, const SamplingParams& p, const RefDist& d,
                             std::mt19937_64& gen, int n_random, int n_boundaries) {
  std::vector<double> us = {0.0, kLastU, 0.5};
  std::uniform_real_distribution<double> unit(0, 1);
  for (int i = 0; i < n_random; ++i) us.push_back(unit(gen));
  for (int i = 0; i < n_boundaries && d.kept.size() > 1; ++i) {
    const size_t j = 1 + gen() % (d.kept.size() - 1);
    const double ref = std::min(static_cast<double>(d.lo[j]), kLastU);  // may round to 1
    us.push_back(ref);
    us.push_back(std::nextafter(ref, 0.0));
    us.push_back(std::min(std::nextafter(ref, 1.0), kLastU));
    const Interval iv = token_interval(x.data(), static_cast<int64_t>(x.size()), p, d.kept[j]);
    if (iv.hi > iv.lo) {
      us.push_back(iv.lo);
      if (iv.lo > 0) us.push_back(std::nextafter(iv.lo, 0.0));
      us.push_back(std::nextafter(iv.hi, 0.0));
    }
  }
  return us;
}

void run_grid(const std::vector<float>& x, const std::vector<double>& temps,
              const std::vector<int64_t>& top_ks, const std::vector<double>& top_ps, int n_random,
              int n_boundaries, bool partition, uint64_t seed, Stats& stats) {
  std::mt19937_64 gen(seed);
  for (double t : temps) {
    const RefRow row = ref_row(x, t);
    for (int64_t k : top_ks) {
      for (double tp : top_ps) {
        const SamplingParams p{t, k, tp};
        const RefDist d = ref_dist(row, p);
        if (d.ambiguous) {
          ++stats.ambiguous_skipped;
          continue;
        }
        for (double u : probe_us(x, p, d, gen, n_random, n_boundaries)) {
          check_sample(x, p, row, d, u, stats);
          if (::testing::Test::HasFatalFailure()) return;
        }
        if (partition) check_partition(x, p, d);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Against the reference.

TEST(Sampler, MatchesReferenceOnSmallVocabularies) {
  Stats stats;
  uint64_t seed = 1;
  for (int64_t vocab : {1, 2, 3, 7, 64, 320}) {
    for (RowKind kind : {RowKind::Normal, RowKind::Integers, RowKind::Masked, RowKind::Peaked}) {
      SCOPED_TRACE(::testing::Message() << "row kind " << static_cast<int>(kind));
      const auto x = make_row(vocab, kind, seed);
      run_grid(x, {0, 0.3, 1, 2}, {0, 1, 5, vocab}, {0.1, 0.9, 1}, 4, 3,
               /*partition=*/true, seed, stats);
      ++seed;
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(stats.samples, 5000);
  EXPECT_LE(stats.ambiguous_skipped, 2);
}

TEST(Sampler, MatchesReferenceOnALargeVocabulary) {
  constexpr int64_t kVocab = 151936;
  Stats stats;
  // A few peaks over a broad background, some masked tokens. Kept small: each call walks 150k
  // logits, so only a handful of probes per configuration.
  const auto x = make_row(kVocab, RowKind::Peaked, 77);
  run_grid(x, {0.3, 2}, {0, 5}, {0.1, 1}, 1, 0, /*partition=*/false, 78, stats);
  if (HasFatalFailure()) return;
  run_grid(x, {1}, {0, 5, kVocab}, {0.1, 1}, 1, 1, /*partition=*/false, 79, stats);
  if (HasFatalFailure()) return;
  run_grid(x, {0}, {0}, {1}, 1, 0, /*partition=*/false, 80, stats);
  if (HasFatalFailure()) return;
  // top_p 0.9 without top-k: the kept set is a ranked prefix of thousands of tokens, found by the
  // growing partial sort.
  const RefDist wide = ref_dist(ref_row(x, 1), {1, 0, 0.9});
  EXPECT_GT(wide.kept.size(), 4096u);
  run_grid(x, {1}, {0}, {0.9}, 1, 0, /*partition=*/false, 81, stats);
  if (HasFatalFailure()) return;
  // top-k then top-p over a large k.
  run_grid(x, {2}, {20000}, {0.5}, 0, 0, /*partition=*/false, 82, stats);
  EXPECT_EQ(stats.ambiguous_skipped, 0);
}

// The reference's kept sets on a few hand-made rows, exactly.
TEST(Sampler, TiesAtTheTopKAndTopPCutGoToTheLowerId) {
  auto intervals = [](const std::vector<float>& x, const SamplingParams& p) {
    std::vector<Interval> out;
    for (int32_t id = 0; id < static_cast<int32_t>(x.size()); ++id) {
      out.push_back(token_interval(x.data(), static_cast<int64_t>(x.size()), p, id));
    }
    return out;
  };
  // Four equal tokens, top_p 0.6: ids 0, 1, 2 (mass 0.75), each a third.
  auto iv = intervals({1, 1, 1, 1}, {1, 0, 0.6});
  EXPECT_EQ(iv[0].lo, 0.0);
  EXPECT_NEAR(iv[0].hi, 1.0 / 3, 1e-15);
  EXPECT_EQ(iv[1].lo, iv[0].hi);
  EXPECT_NEAR(iv[1].hi, 2.0 / 3, 1e-15);
  EXPECT_EQ(iv[2].lo, iv[1].hi);
  EXPECT_EQ(iv[2].hi, 1.0);
  EXPECT_EQ(iv[3].lo, iv[3].hi);
  // Mass exactly top_p is enough: two equal tokens, top_p 0.5 keeps only id 0.
  iv = intervals({0, 0}, {1, 0, 0.5});
  EXPECT_EQ(iv[0].lo, 0.0);
  EXPECT_EQ(iv[0].hi, 1.0);
  EXPECT_EQ(iv[1].lo, iv[1].hi);
  EXPECT_EQ(sample_token(std::vector<float>{0, 0}.data(), 2, {1, 0, 0.5}, kLastU).token, 0);
  // top_k 2 with three tied maxima at ids 1, 3, 4: ids 1 and 3, half each.
  iv = intervals({0, 2, 1, 2, 2}, {1, 2, 1});
  EXPECT_EQ(iv[1].lo, 0.0);
  EXPECT_EQ(iv[1].hi, 0.5);
  EXPECT_EQ(iv[3].lo, 0.5);
  EXPECT_EQ(iv[3].hi, 1.0);
  for (int id : {0, 2, 4}) EXPECT_EQ(iv[id].lo, iv[id].hi) << id;
  // top-p applies to the renormalised top-k distribution: logits ln 4, ln 2, ln 1, ln 1 with
  // top_k 3 give 4/7, 2/7, 1/7; top_p 0.8 needs 6/7 (ids 0 and 1), not the 6/8 of the full row.
  const std::vector<float> x = {std::log(4.0f), std::log(2.0f), 0, 0};
  iv = intervals(x, {1, 3, 0.8});
  EXPECT_NEAR(iv[0].hi, 4.0 / 6, 1e-7);
  EXPECT_EQ(iv[1].hi, 1.0);
  EXPECT_EQ(iv[2].lo, iv[2].hi);
  EXPECT_EQ(iv[3].lo, iv[3].hi);
  // Without top-k, top_p 0.74 is reached by ids 0 and 1 (6/8).
  iv = intervals(x, {1, 0, 0.74});
  EXPECT_EQ(iv[1].hi, 1.0);
  EXPECT_EQ(iv[2].lo, iv[2].hi);
}

TEST(Sampler, GreedyTakesTheLowestArgmaxWithLogprobAtTemperatureOne) {
  const std::vector<float> x = {1, 3, 3, 2, kNegInf};
  const long double sum = std::exp(1.0L) + 2 * std::exp(3.0L) + std::exp(2.0L);
  const double want = static_cast<double>(3.0L - std::log(sum));
  for (double u : {0.0, 0.3, kLastU}) {
    for (const SamplingParams& p : {SamplingParams{0, 0, 1}, SamplingParams{0, 3, 0.2}}) {
      const Sample s = sample_token(x.data(), 5, p, u);
      EXPECT_EQ(s.token, 1);
      EXPECT_NEAR(s.logprob, want, 1e-6);
    }
  }
  const Interval a = token_interval(x.data(), 5, {0, 0, 1}, 1);
  EXPECT_EQ(a.lo, 0.0);
  EXPECT_EQ(a.hi, 1.0);
  for (int32_t id : {0, 2, 3, 4}) {
    const Interval b = token_interval(x.data(), 5, {0, 0, 1}, id);
    EXPECT_EQ(b.lo, b.hi) << id;
  }
  // Leading masked tokens and a tie: still the lowest id among the maxima.
  const std::vector<float> y = {kNegInf, kNegInf, -7, -2, -2};
  EXPECT_EQ(sample_token(y.data(), 5, {0, 0, 1}, 0.9).token, 3);
}

TEST(Sampler, SingleTokenAndTinyTemperature) {
  const float one = 0.7f;
  for (double t : {0.0, 1e-30, 0.3, 1.0, 2.0}) {
    for (double u : {0.0, 0.5, kLastU}) {
      const Sample s = sample_token(&one, 1, {t, 1, 0.1}, u);
      EXPECT_EQ(s.token, 0);
      EXPECT_EQ(s.logprob, 0.0f);
    }
    const Interval iv = token_interval(&one, 1, {t, 0, 1}, 0);
    EXPECT_EQ(iv.lo, 0.0);
    EXPECT_EQ(iv.hi, 1.0);
  }
  // T -> 0 without being greedy: the two tied maxima split [0, 1); nothing overflows.
  const std::vector<float> x = {5, 5, 4};
  for (double t : {1e-6, 1e-30, 1e-300}) {
    const Interval a = token_interval(x.data(), 3, {t, 0, 1}, 0);
    const Interval b = token_interval(x.data(), 3, {t, 0, 1}, 1);
    const Interval c = token_interval(x.data(), 3, {t, 0, 1}, 2);
    EXPECT_EQ(a.lo, 0.0);
    EXPECT_EQ(a.hi, 0.5);
    EXPECT_EQ(b.lo, 0.5);
    EXPECT_EQ(b.hi, 1.0);
    EXPECT_EQ(c.lo, c.hi);
    const Sample s = sample_token(x.data(), 3, {t, 0, 1}, 0.75);
    EXPECT_EQ(s.token, 1);
    EXPECT_NEAR(s.logprob, -std::log(2.0), 1e-6);
  }
}

TEST(Sampler, MaskedTokensAreNeverSampled) {
  std::vector<float> x(50);
  for (int i = 0; i < 50; ++i) x[i] = static_cast<float>((i * 7) % 11) * 0.3f;
  for (int i : {0, 1, 2, 10, 11, 12, 13, 14, 15, 20, 47, 48, 49}) x[i] = kNegInf;
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<double> unit(0, 1);
  for (double t : {0.3, 1.0, 2.0, 50.0}) {
    for (int64_t k : {0, 5, 40, 50}) {
      for (double tp : {0.1, 0.9, 1.0}) {
        const SamplingParams p{t, k, tp};
        std::vector<double> us = {0.0, kLastU, std::nextafter(kLastU, 0.0)};
        for (int i = 0; i < 20; ++i) us.push_back(unit(gen));
        for (int32_t id = 0; id < 50; ++id) {
          const Interval iv = token_interval(x.data(), 50, p, id);
          if (x[id] == kNegInf) {
            EXPECT_EQ(iv.lo, iv.hi) << "masked id " << id;
          }
          if (iv.hi > iv.lo) {
            us.push_back(iv.lo);
            us.push_back(std::nextafter(iv.hi, 0.0));
          }
        }
        for (double u : us) {
          const Sample s = sample_token(x.data(), 50, p, u);
          EXPECT_NE(x[s.token], kNegInf) << "T " << t << " k " << k << " p " << tp << " u " << u;
          EXPECT_TRUE(std::isfinite(s.logprob));
        }
      }
    }
  }
  // One finite token among masked ones takes all of [0, 1) with log-prob 0.
  std::vector<float> y(9, kNegInf);
  y[4] = -3;
  for (double u : {0.0, 0.5, kLastU}) {
    const Sample s = sample_token(y.data(), 9, {1.5, 0, 0.3}, u);
    EXPECT_EQ(s.token, 4);
    EXPECT_EQ(s.logprob, 0.0f);
  }
}

TEST(Sampler, IdsAtOrBeyondVocabAreNeverSampled) {
  const std::vector<float> x = {0, 1, 0.5, -1, 0.2, 0.1, 50, 60, 70, 80};
  for (double u : {0.0, 0.5, 0.99, kLastU}) {
    EXPECT_LT(sample_token(x.data(), 6, {1, 0, 1}, u).token, 6);
  }
  EXPECT_EQ(sample_token(x.data(), 6, {0, 0, 1}, 0.5).token, 1);
  const Interval iv = token_interval(x.data(), 6, {1, 0, 1}, 7);
  EXPECT_EQ(iv.lo, iv.hi);
  EXPECT_EQ(token_interval(x.data(), 6, {1, 0, 1}, -1).hi, 0.0);
}

TEST(Sampler, TopLogprobsAreSortedExactAndClamped) {
  for (int64_t vocab : {1, 7, 320}) {
    for (RowKind kind : {RowKind::Integers, RowKind::Masked, RowKind::Normal}) {
      const auto x = make_row(vocab, kind, 1000 + vocab);
      for (double t : {0.0, 0.5, 1.0, 2.0}) {
        const RefRow row = ref_row(x, t);
        for (int64_t n : {-3L, 0L, 1L, 5L, vocab, vocab + 100}) {
          SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " T " << t << " n " << n);
          const auto top = top_logprobs(x.data(), vocab, t, n);
          ASSERT_EQ(static_cast<int64_t>(top.size()), std::clamp<int64_t>(n, 0, vocab));
          for (size_t j = 0; j < top.size(); ++j) {
            EXPECT_EQ(top[j].first, row.rank[j]) << "rank " << j;
            const long double want = row.logp[top[j].first];
            if (std::isinf(want)) {
              EXPECT_EQ(top[j].second, kNegInf);
            } else {
              EXPECT_NEAR(top[j].second, static_cast<double>(want), logprob_tol(want));
            }
            if (j > 0) {
              EXPECT_LE(top[j].second, top[j - 1].second);
            }
          }
        }
      }
    }
  }
  const auto big = make_row(151936, RowKind::Peaked, 3);
  const RefRow row = ref_row(big, 0.7);
  const auto top = top_logprobs(big.data(), 151936, 0.7, 20);
  ASSERT_EQ(top.size(), 20u);
  for (size_t j = 0; j < top.size(); ++j) {
    EXPECT_EQ(top[j].first, row.rank[j]);
    EXPECT_NEAR(top[j].second, static_cast<double>(row.logp[row.rank[j]]), 1e-5);
  }
}

// ---------------------------------------------------------------------------------------------
// sampling_uniform and frequencies.

TEST(SamplingUniform, IsPhiloxKeyedBySeedWithPositionAsCounter) {
  for (uint64_t seed : {0ULL, 1ULL, 0x123456789abcdef0ULL, ~0ULL}) {
    for (int64_t pos : {0LL, 1LL, 4095LL, 0x100000001LL, 0x7fffffffffffffffLL}) {
      const auto w =
          philox4x32({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32), 0, 0},
                     {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
      EXPECT_EQ(sampling_uniform(seed, pos), uniform53(w[0], w[1])) << seed << " " << pos;
    }
  }
  // The high words of seed and position both matter.
  EXPECT_NE(sampling_uniform(1, 0), sampling_uniform(1 + (1ULL << 32), 0));
  EXPECT_NE(sampling_uniform(0, 1), sampling_uniform(0, 1 + (1LL << 32)));
}

TEST(SamplingUniform, DistinctAndUniformOverSeedsAndPositions) {
  constexpr int kSeeds = 200, kPositions = 300, kBins = 50;
  const int n = kSeeds * kPositions;
  std::set<double> seen;
  std::vector<int> counts(kBins, 0);
  double sum = 0, sum2 = 0;
  for (int s = 0; s < kSeeds; ++s) {
    for (int pos = 0; pos < kPositions; ++pos) {
      const double u = sampling_uniform(0x5eed0000ULL + static_cast<uint64_t>(s) * 7919, pos);
      ASSERT_GE(u, 0.0);
      ASSERT_LT(u, 1.0);
      seen.insert(u);
      sum += u;
      sum2 += u * u;
      ++counts[static_cast<int>(u * kBins)];
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), n);
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / n));
  double chi2 = 0;
  for (int c : counts)
    chi2 += (c - double(n) / kBins) * (c - double(n) / kBins) / (double(n) / kBins);
  EXPECT_LT(chi2, 49 + 6 * std::sqrt(2.0 * 49));  // 49 degrees of freedom
}

// Sampling with u = sampling_uniform(seed, position) reproduces the reference distribution: a
// chi-square over the kept tokens (deterministic: fixed seed), and never an excluded token.
TEST(Sampler, FrequenciesMatchTheReferenceDistribution) {
  const std::vector<float> x = {1.0f, 2.5f, -0.5f, 2.5f, 0.0f, kNegInf, 1.7f, 3.0f, -1.0f, 0.4f};
  constexpr int kDraws = 40000;
  for (const SamplingParams& p : {SamplingParams{1, 0, 1}, SamplingParams{0.8, 6, 0.95},
                                  SamplingParams{2, 0, 0.9}, SamplingParams{0.5, 4, 1}}) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p);
    const RefRow row = ref_row(x, p.temperature);
    const RefDist d = ref_dist(row, p);
    ASSERT_FALSE(d.ambiguous);
    std::vector<int> counts(x.size(), 0);
    for (int pos = 0; pos < kDraws; ++pos) {
      ++counts[sample_token(x.data(), 10, p, sampling_uniform(0xC0FFEE, pos)).token];
    }
    double chi2 = 0;
    int df = -1;
    std::vector<bool> kept(x.size(), false);
    for (size_t j = 0; j < d.kept.size(); ++j) {
      const long double prob = d.hi[j] - d.lo[j];
      kept[d.kept[j]] = true;
      if (prob == 0) continue;
      const double e = kDraws * static_cast<double>(prob);
      chi2 += (counts[d.kept[j]] - e) * (counts[d.kept[j]] - e) / e;
      ++df;
    }
    for (size_t id = 0; id < x.size(); ++id) {
      if (!kept[id]) {
        EXPECT_EQ(counts[id], 0) << "excluded id " << id << " was sampled";
      }
    }
    ASSERT_GE(df, 2);
    EXPECT_LT(chi2, df + 6 * std::sqrt(2.0 * df) + 10) << "df " << df;
  }
}

TEST(Sampler, SameSeedAndPositionGiveTheSameTokenInAnyOrder) {
  const auto x = make_row(320, RowKind::Normal, 42);
  const auto other = make_row(2000, RowKind::Peaked, 43);
  const SamplingParams p{0.9, 50, 0.95};
  constexpr int kN = 300;
  std::vector<int32_t> forward(kN), backward(kN), threaded(kN);
  for (int pos = 0; pos < kN; ++pos) {
    forward[pos] = sample_token(x.data(), 320, p, sampling_uniform(17, pos)).token;
  }
  for (int pos = kN - 1; pos >= 0; --pos) {
    // Unrelated work in between, with other rows, vocab sizes and parameters.
    sample_token(other.data(), 2000, {1.3, 0, 0.5}, sampling_uniform(99, pos));
    token_interval(other.data(), 2000, {0.7, 7, 1}, pos);
    top_logprobs(other.data(), 2000, 1.0, 5);
    backward[pos] = sample_token(x.data(), 320, p, sampling_uniform(17, pos)).token;
  }
  std::thread t([&] {
    for (int pos = 0; pos < kN; pos += 2) {
      threaded[pos] = sample_token(x.data(), 320, p, sampling_uniform(17, pos)).token;
    }
    for (int pos = 1; pos < kN; pos += 2) {
      threaded[pos] = sample_token(x.data(), 320, p, sampling_uniform(17, pos)).token;
    }
  });
  t.join();
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(forward, threaded);
  // Different seeds give different completions.
  std::vector<int32_t> other_seed(kN);
  for (int pos = 0; pos < kN; ++pos) {
    other_seed[pos] = sample_token(x.data(), 320, p, sampling_uniform(18, pos)).token;
  }
  EXPECT_NE(forward, other_seed);
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(SamplerErrors, InvalidParametersNameTheProblem) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_NO_THROW(validate_sampling({0, 0, 1}, "req"));
  EXPECT_NO_THROW(validate_sampling({1e-9, 100000, 1e-9}, "req"));
  EXPECT_TRUE(throws_error(
      [&] {
        validate_sampling({-1, 0, 1}, "request 7");
      },
      {"temperature", "request 7"}));
  EXPECT_TRUE(throws_error([&] { validate_sampling({nan, 0, 1}, "r"); }, {"temperature"}));
  EXPECT_TRUE(throws_error([&] { validate_sampling({inf, 0, 1}, "r"); }, {"temperature"}));
  EXPECT_TRUE(throws_error([&] { validate_sampling({1, -1, 1}, "r"); }, {"top_k"}));
  EXPECT_TRUE(throws_error([&] { validate_sampling({1, 0, 0}, "r"); }, {"top_p"}));
  EXPECT_TRUE(throws_error([&] { validate_sampling({1, 0, -0.5}, "r"); }, {"top_p"}));
  EXPECT_TRUE(throws_error([&] { validate_sampling({1, 0, 1.5}, "r"); }, {"top_p"}));
  EXPECT_TRUE(throws_error([&] { validate_sampling({1, 0, nan}, "r"); }, {"top_p"}));

  const std::vector<float> x = {0.5f, 1.0f, -1.0f};
  const std::vector<std::pair<SamplingParams, const char*>> bad = {
      {{-1, 0, 1}, "temperature"}, {{nan, 0, 1}, "temperature"}, {{inf, 0, 1}, "temperature"},
      {{1, -2, 1}, "top_k"},       {{1, 0, 0}, "top_p"},         {{1, 0, 1.01}, "top_p"},
      {{0, -1, 1}, "top_k"},       {{0, 0, 0}, "top_p"}};
  for (const auto& item : bad) {
    const SamplingParams p = item.first;
    const std::string what = item.second;
    EXPECT_TRUE(throws_error([&] { sample_token(x.data(), 3, p, 0.5); }, {what, "sample_token"}));
    EXPECT_TRUE(throws_error([&] { token_interval(x.data(), 3, p, 0); }, {what, "token_interval"}));
  }
  EXPECT_TRUE(
      throws_error([&] { top_logprobs(x.data(), 3, -0.1, 2); }, {"temperature", "top_logprobs"}));
  EXPECT_TRUE(throws_error([&] { top_logprobs(x.data(), 3, nan, 2); }, {"temperature"}));
  for (double u : {-0.1, 1.0, 1.5, nan}) {
    EXPECT_TRUE(throws_error([&] { sample_token(x.data(), 3, {1, 0, 1}, u); }, {"u must be in"}));
  }
}

TEST(SamplerErrors, BadRowsNameTheToken) {
  std::vector<float> with_nan = {0, 1, 2, std::numeric_limits<float>::quiet_NaN(), 4};
  std::vector<float> with_inf = {0, 1, 2, 3, 4, std::numeric_limits<float>::infinity()};
  std::vector<float> all_masked(4, kNegInf);
  for (double t : {0.0, 1.0}) {
    const SamplingParams p{t, 2, 0.9};
    EXPECT_TRUE(
        throws_error([&] { sample_token(with_nan.data(), 5, p, 0.5); }, {"NaN", "token 3"}));
    EXPECT_TRUE(
        throws_error([&] { sample_token(with_inf.data(), 6, p, 0.5); }, {"+inf", "token 5"}));
    EXPECT_TRUE(throws_error([&] { sample_token(all_masked.data(), 4, p, 0.5); }, {"finite"}));
    EXPECT_TRUE(
        throws_error([&] { token_interval(with_nan.data(), 5, p, 0); }, {"NaN", "token 3"}));
    EXPECT_TRUE(
        throws_error([&] { token_interval(with_inf.data(), 6, p, 0); }, {"+inf", "token 5"}));
    EXPECT_TRUE(throws_error([&] { token_interval(all_masked.data(), 4, p, 0); }, {"finite"}));
    EXPECT_TRUE(throws_error([&] { top_logprobs(with_nan.data(), 5, t, 2); }, {"NaN", "token 3"}));
    EXPECT_TRUE(throws_error([&] { top_logprobs(with_inf.data(), 6, t, 2); }, {"+inf", "token 5"}));
    EXPECT_TRUE(throws_error([&] { top_logprobs(all_masked.data(), 4, t, 2); }, {"finite"}));
    EXPECT_TRUE(throws_error([&] { sample_token(with_nan.data(), 0, p, 0.5); }, {"vocab"}));
  }
  // A NaN beyond vocab is not part of the row.
  EXPECT_EQ(sample_token(with_nan.data(), 3, {0, 0, 1}, 0.5).token, 2);
}

}  // namespace
}  // namespace trellis::engine
