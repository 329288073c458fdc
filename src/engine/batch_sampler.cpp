#include "engine/batch_sampler.h"

#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"

namespace trellis::engine {

std::vector<Sample> sample_batch(const torch::Tensor& logits,
                                 const std::vector<SamplingParams>& params,
                                 const std::vector<double>& u) {
  constexpr const char* kWhere = "sample_batch";
  if (logits.dim() != 2 || logits.scalar_type() != torch::kFloat32)
    fail(kWhere, "logits must be fp32 [rows, vocab]");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (static_cast<int64_t>(params.size()) != rows || static_cast<int64_t>(u.size()) != rows)
    fail(kWhere, "{} rows of logits but {} sampling params and {} u", rows, params.size(),
         u.size());
  if (vocab <= 0 || vocab > std::numeric_limits<int32_t>::max())
    fail(kWhere, "vocab must be in [1, 2^31), got {}", vocab);
  if (rows == 0) return {};

  std::vector<double> temperature(rows), top_p(rows), target_u(rows);
  std::vector<int64_t> limit(rows), greedy(rows);
  bool truncated = false;
  for (int64_t i = 0; i < rows; ++i) {
    const SamplingParams& p = params[i];
    validate_sampling(p, fmt::format("{}: row {}", kWhere, i));
    if (!(u[i] >= 0 && u[i] < 1)) fail(kWhere, "row {}: u must be in [0, 1), got {}", i, u[i]);
    greedy[i] = p.temperature == 0;
    temperature[i] = greedy[i] != 0 ? 1.0 : p.temperature;
    limit[i] = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
    top_p[i] = p.top_p;
    target_u[i] = u[i];
    truncated |= greedy[i] == 0 && (limit[i] < vocab || p.top_p < 1);
  }
  const auto device = logits.device();
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  auto column = [&](const auto& v, torch::TensorOptions opts) {
    return torch::tensor(v, opts.device(torch::kCPU)).to(device).view({rows, 1});
  };

  // Weights w = exp((x - max) / T) in double, every exponent <= 0; their id-order sum normalises
  // the log-prob whatever top-k / top-p keep (specs/rl.md §1's behaviour log-prob).
  const auto x = logits.to(torch::kFloat64);
  const auto max = std::get<0>(x.max(1, /*keepdim=*/true));
  const auto scaled = (x - max) / column(temperature, f64);
  const auto w = scaled.exp();
  const auto sum = w.sum(1);

  // Rows with a NaN, a +inf, or no finite logit: the scalar sampler names the culprit.
  const auto bad =
      (~torch::isfinite(sum)).logical_or(~torch::isfinite(max.squeeze(1))).to(torch::kCPU);
  if (bad.any().item<bool>()) {
    for (int64_t i = 0; i < rows; ++i) {
      if (!bad[i].item<bool>()) continue;
      const auto row = logits[i].to(torch::kCPU).contiguous();
      try {
        sample_token(row.data_ptr<float>(), vocab, params[i], u[i]);
      } catch (const Error& e) {
        throw Error(e.what(), fmt::format("{}: row {}", kWhere, i));
      }
    }
  }

  // The kept ids: the `limit` heaviest (a stable descending sort ranks ties by id), then the
  // shortest prefix of those holding top_p of their mass (the row's id-order sum without top-k;
  // all of them if rounding never gets there), marked in id order.
  auto kept_w = w;
  if (truncated) {
    const auto [sorted, order] = w.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true);
    const auto rank =
        torch::arange(vocab, torch::TensorOptions().dtype(torch::kInt64).device(device))
            .view({1, vocab});
    const auto limits = column(limit, torch::TensorOptions().dtype(torch::kInt64));
    const auto in_top_k = rank < limits;
    const auto cum = (sorted * in_top_k).cumsum(1);
    const auto base =
        torch::where(limits < vocab, cum.select(1, vocab - 1).view({rows, 1}), sum.view({rows, 1}));
    const auto reached = (cum >= column(top_p, f64) * base).logical_and(in_top_k);
    // First rank that reaches the threshold, + 1; `limit` where none does or top_p is 1.
    const auto first =
        torch::where(reached.any(1, /*keepdim=*/true),
                     reached.to(torch::kInt64).argmax(1, /*keepdim=*/true) + 1, limits);
    const auto count = torch::where(column(top_p, f64) >= 1, limits, first);
    const auto keep_sorted = (rank < count).to(torch::kFloat64);
    kept_w = w * torch::zeros_like(w).scatter(1, order, keep_sorted);
  }

  // Inverse CDF in id order: the first id whose cumulative kept weight passes t = u * M, with t
  // held below M so that u close to 1 still lands on the last token with weight.
  const auto c = kept_w.cumsum(1);
  const auto mass = c.select(1, vocab - 1).view({rows, 1});
  const auto t =
      torch::minimum(column(target_u, f64) * mass, torch::nextafter(mass, torch::zeros_like(mass)));
  const auto sampled = (c <= t).sum(1);  // ids before the first c > t
  const auto argmax = x.argmax(1);       // the first maximal logit: the lowest id on ties
  const auto token = torch::where(
      column(greedy, torch::TensorOptions().dtype(torch::kInt64)).squeeze(1) != 0, argmax, sampled);
  const auto logprob = scaled.gather(1, token.view({rows, 1})).squeeze(1) - sum.log();

  const auto tokens = token.to(torch::kCPU).to(torch::kInt32).contiguous();
  const auto logps = logprob.to(torch::kCPU).to(torch::kFloat32).contiguous();
  std::vector<Sample> out(rows);
  for (int64_t i = 0; i < rows; ++i)
    out[i] = {tokens.data_ptr<int32_t>()[i], logps.data_ptr<float>()[i]};
  return out;
}

}  // namespace trellis::engine
