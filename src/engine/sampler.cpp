// Verifiable sampling (see sampler.h). A row's distribution is held as unnormalised double weights
// w_i = exp((x_i - x_max) / T) (the most likely token weighs 1) and a kept set of ids; u selects by
// walking the kept ids in id order with cumulative weights c_i, scaled by the kept mass M instead
// of dividing every weight by it. sample_token and token_interval share that walk, so a token's
// interval is exactly the set of u that selects it.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.h"
#include "common/rng.h"
#include "model/vec_math.h"

namespace trellis::engine {
namespace {

// Per-thread scratch, reused across calls so that a 150k-token row costs no allocation.
struct Scratch {
  std::vector<double> weights;
  std::vector<int32_t> order;
  std::vector<int32_t> kept;
};
thread_local Scratch scratch;

// One row under one temperature: weights, their id-order sum, the argmax (lowest id on ties).
struct Weights {
  const float* logits = nullptr;
  int64_t vocab = 0;
  double temperature = 1;
  float max_logit = 0;
  int32_t argmax = 0;
  const double* w = nullptr;  // scratch.weights
  double sum = 0;             // sum of w in id order, from 0

  double logprob(int32_t id) const {
    return (static_cast<double>(logits[id]) - max_logit) / temperature - std::log(sum);
  }
};

[[noreturn]] void fail_logits(const float* logits, int64_t vocab, const char* where) {
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) fail(where, "logit of token {} is NaN", i);
    if (std::isinf(logits[i]) && logits[i] > 0) fail(where, "logit of token {} is +inf", i);
  }
  fail(where, "no token has a finite logit");
}

// Two passes over the row: the maximum, then w_i = exp((x_i - max) / T) summed in id order.
// Subtracting in double before dividing keeps every exponent <= 0 (no overflow for tiny T).
Weights weigh(const float* logits, int64_t vocab, double temperature, const char* where) {
  if (vocab <= 0 || vocab > std::numeric_limits<int32_t>::max()) {
    fail(where, "vocab must be in [1, 2^31), got {}", vocab);
  }
  Weights r;
  r.logits = logits;
  r.vocab = vocab;
  r.temperature = temperature;
  float m = -std::numeric_limits<float>::infinity();
  int32_t arg = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] > m) {
      m = logits[i];
      arg = static_cast<int32_t>(i);
    }
  }
  r.max_logit = m;
  r.argmax = arg;
  scratch.weights.resize(vocab);
  double* w = scratch.weights.data();
  model::vec::exp_weights(logits, vocab, m, temperature, w);  // vectorised: most of the time
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += w[i];
  // NaN or +inf anywhere makes the sum NaN; all -inf makes the maximum -inf.
  if (!std::isfinite(m) || !std::isfinite(sum)) fail_logits(logits, vocab, where);
  r.w = w;
  r.sum = sum;
  return r;
}

// The tokens top-k / top-p keep, and their mass M (the final cumulative weight of the walk).
struct Kept {
  bool all = true;                    // every id in [0, vocab)
  const std::vector<int32_t>* ids{};  // ascending, when !all
  double mass = 0;
};

// Calls f(id, c_before, c_after) for each kept id in id order, where c is the running sum of the
// kept weights (the unnormalised CDF), until f returns true. Both sample_token and token_interval
// go through here, so they see bit-identical cumulative values.
template <typename F>
void walk(const Weights& row, const Kept& kept, F&& f) {
  double c = 0;
  auto step = [&](int32_t id) {
    const double before = c;
    c += row.w[id];
    return f(id, before, c);
  };
  if (kept.all) {
    for (int64_t i = 0; i < row.vocab; ++i) {
      if (step(static_cast<int32_t>(i))) return;
    }
  } else {
    for (int32_t id : *kept.ids) {
      if (step(id)) return;
    }
  }
}

double final_mass(const Weights& row, const Kept& kept) {
  double mass = 0;
  walk(row, kept, [&](int32_t, double, double c) {
    mass = c;
    return false;
  });
  return mass;
}

// Applies top-k then top-p (on the top-k mass, i.e. the renormalised top-k distribution). Tokens
// rank by weight, descending, lower id first on ties. Without truncation nothing is sorted; with
// it, only the candidates are: the top k by nth_element, or for top-p alone a most-likely prefix
// that grows (nth_element + sort on the next slice) until it holds the requested mass.
Kept keep(const Weights& row, const SamplingParams& params) {
  Kept kept;
  const int64_t vocab = row.vocab;
  const int64_t limit = params.top_k > 0 && params.top_k < vocab ? params.top_k : vocab;
  if (limit == vocab && params.top_p >= 1) {
    kept.mass = row.sum;  // the same id-order sum the walk would produce
    return kept;
  }
  const double* w = row.w;
  auto before = [w](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
  std::vector<int32_t>& order = scratch.order;
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);

  int64_t count = limit;
  if (params.top_p >= 1) {
    std::nth_element(order.begin(), order.begin() + limit, order.end(), before);
  } else {
    int64_t sorted = 0;  // order[0, sorted) holds the most likely tokens, ranked
    auto extend = [&](int64_t n) {
      n = std::min(n, limit);
      if (n <= sorted) return;
      if (n < vocab)
        std::nth_element(order.begin() + sorted, order.begin() + n, order.end(), before);
      std::sort(order.begin() + sorted, order.begin() + n, before);
      sorted = n;
    };
    double base = row.sum;
    if (limit < vocab) {
      extend(limit);
      base = 0;
      for (int64_t j = 0; j < limit; ++j) base += w[order[j]];
    }
    const double threshold = params.top_p * base;
    count = -1;
    double cum = 0;
    int64_t j = 0;
    for (int64_t want = 512; count < 0; want *= 2) {
      extend(want);
      for (; j < sorted && count < 0; ++j) {
        cum += w[order[j]];
        if (cum >= threshold) count = j + 1;
      }
      if (count < 0 && sorted == limit) count = limit;  // rounding kept cum just below
    }
  }
  std::vector<int32_t>& ids = scratch.kept;
  ids.assign(order.begin(), order.begin() + count);
  std::sort(ids.begin(), ids.end());
  kept.all = false;
  kept.ids = &ids;
  kept.mass = final_mass(row, kept);
  return kept;
}

// Where u in [0, 1) lands on the unnormalised CDF: u * M, held below M so that u close to 1 still
// falls inside the last token with weight (never past it).
double target(double u, double mass) { return std::min(u * mass, std::nextafter(mass, 0.0)); }

// The smallest u in [0, 1) with u * M >= c (as rounded), for 0 <= c < M: the start of the u range
// whose target reaches cumulative weight c. u * M is monotone in u, so a few steps from c / M
// find it.
double first_u_reaching(double c, double mass) {
  if (c <= 0) return 0;
  double u = std::min(c / mass, std::nextafter(1.0, 0.0));
  while (u > 0 && std::nextafter(u, 0.0) * mass >= c) u = std::nextafter(u, 0.0);
  while (u * mass < c) u = std::nextafter(u, 1.0);
  return u;
}

}  // namespace

void validate_sampling(const SamplingParams& params, const std::string& where) {
  if (!(params.temperature >= 0) || !std::isfinite(params.temperature)) {
    fail(where, "temperature must be a finite number >= 0 (0 = greedy), got {}",
         params.temperature);
  }
  if (params.top_k < 0) fail(where, "top_k must be >= 0 (0 = all tokens), got {}", params.top_k);
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    fail(where, "top_p must be in (0, 1] (1 = all tokens), got {}", params.top_p);
  }
}

double sampling_uniform(uint64_t seed, int64_t position) {
  const auto pos = static_cast<uint64_t>(position);
  const auto w = philox4x32({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32), 0, 0},
                            {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return uniform53(w[0], w[1]);
}

Sample sample_token(const float* logits, int64_t vocab, const SamplingParams& params, double u) {
  constexpr const char* kWhere = "sample_token";
  validate_sampling(params, kWhere);
  if (!(u >= 0 && u < 1)) fail(kWhere, "u must be in [0, 1), got {}", u);
  if (params.temperature == 0) {
    const Weights row = weigh(logits, vocab, 1.0, kWhere);
    return {row.argmax, static_cast<float>(row.logprob(row.argmax))};
  }
  const Weights row = weigh(logits, vocab, params.temperature, kWhere);
  const Kept kept = keep(row, params);
  const double t = target(u, kept.mass);
  int32_t token = -1;
  walk(row, kept, [&](int32_t id, double, double c) {
    if (t < c) token = id;  // first token whose cumulative weight passes t: its weight is > 0
    return token >= 0;
  });
  // t < M = the walk's final cumulative weight, so the walk always stops on a token.
  return {token, static_cast<float>(row.logprob(token))};
}

Interval token_interval(const float* logits, int64_t vocab, const SamplingParams& params,
                        int32_t token) {
  constexpr const char* kWhere = "token_interval";
  validate_sampling(params, kWhere);
  if (params.temperature == 0) {
    const Weights row = weigh(logits, vocab, 1.0, kWhere);
    return token == row.argmax ? Interval{0, 1} : Interval{};
  }
  const Weights row = weigh(logits, vocab, params.temperature, kWhere);
  if (token < 0 || token >= vocab) return {};
  const Kept kept = keep(row, params);
  bool found = false;
  double c_before = 0, c_after = 0;
  walk(row, kept, [&](int32_t id, double before, double after) {
    if (id != token) return false;
    found = true;
    c_before = before;
    c_after = after;
    return true;
  });
  // Selected iff c_before <= target(u) < c_after. The token that brings the cumulative weight to
  // M also takes every u whose product rounds up to M.
  if (!found || !(c_after > c_before)) return {};
  const double lo = first_u_reaching(c_before, kept.mass);
  const double hi = c_after >= kept.mass ? 1.0 : first_u_reaching(c_after, kept.mass);
  return {lo, hi};
}

std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab,
                                                    double temperature, int64_t n) {
  constexpr const char* kWhere = "top_logprobs";
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    fail(kWhere, "temperature must be a finite number >= 0, got {}", temperature);
  }
  const Weights row = weigh(logits, vocab, temperature == 0 ? 1.0 : temperature, kWhere);
  n = std::clamp<int64_t>(n, 0, vocab);
  std::vector<int32_t>& order = scratch.order;
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Log-probs are monotone in the logits for T > 0; ranking by the logits themselves keeps
  // distinct logits distinct.
  std::partial_sort(order.begin(), order.begin() + n, order.end(), [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(n);
  for (int64_t j = 0; j < n; ++j) {
    out.emplace_back(order[j], static_cast<float>(row.logprob(order[j])));
  }
  return out;
}

}  // namespace trellis::engine
