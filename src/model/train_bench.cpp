#include "model/train_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace trellis::model {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sync(const Compute& c) {
  if (c.device.is_cuda()) torch::cuda::synchronize();
}

}  // namespace

double measure_matmul_flops(const Compute& compute, int64_t n) {
  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().dtype(compute.dtype).device(compute.device);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  auto c = torch::matmul(a, b);  // warm-up: oneDNN picks and caches its kernel here
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    sync(compute);
    double t0 = now_s();
    c = torch::matmul(a, b);
    sync(compute);
    best = std::min(best, now_s() - t0);
  }
  return 2.0 * n * n * n / best;
}

double train_flops(const HfConfig& c, int64_t tokens, double sum_sq_lens) {
  const int64_t q = c.num_attention_heads * c.head_dim;
  return 6.0 * static_cast<double>(c.num_matmul_parameters()) * tokens +
         6.0 * c.num_hidden_layers * q * sum_sq_lens;  // 2 matmuls x 2 FLOPs x 3 passes x 1/2
}

TrainBenchResult bench_train(Transformer& model, const TrainBenchOptions& o,
                             const std::function<void(int64_t, double)>& on_step) {
  const auto& cfg = model.config();
  std::mt19937_64 rng(o.seed);
  model.set_requires_grad(true);
  torch::optim::AdamW opt(model.parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.01));

  // One packed row: samples of random length, positions restarting at 0 in each.
  auto make_row = [&](std::vector<int64_t>& lens) {
    lens.clear();
    int64_t left = o.seq_len;
    const int64_t hi = std::max<int64_t>(o.min_sample, o.seq_len / 2);
    while (left > 0) {
      int64_t len = std::min<int64_t>(
          left, std::uniform_int_distribution<int64_t>(std::min(o.min_sample, hi), hi)(rng));
      lens.push_back(len);
      left -= len;
    }
    std::vector<int64_t> pos;
    for (int64_t len : lens)
      for (int64_t i = 0; i < len; ++i) pos.push_back(i);
    auto tokens = torch::randint(cfg.vocab_size, {o.seq_len + 1}, torch::kInt64);
    return std::make_pair(tokens, torch::tensor(pos, torch::kInt64));
  };

  // One optimizer step over micro_batches packed rows; returns (mean loss, sum of len^2).
  TrainBenchResult r;
  auto step = [&]() {
    opt.zero_grad();
    double loss_sum = 0, sum_sq = 0;
    for (int64_t mb = 0; mb < o.micro_batches; ++mb) {
      std::vector<int64_t> lens;
      auto [tokens, pos] = make_row(lens);
      double t0 = now_s();
      auto logits = model.forward_packed(tokens.narrow(0, 0, o.seq_len), pos, lens).logits;
      auto target = tokens.narrow(0, 1, o.seq_len).to(logits.device());
      auto loss = torch::nn::functional::cross_entropy(logits, target) / o.micro_batches;
      sync(model.compute());
      double t1 = now_s();
      loss.backward();
      sync(model.compute());
      r.forward_s += t1 - t0;
      r.backward_s += now_s() - t1;
      loss_sum += loss.item<double>();
      for (int64_t len : lens) sum_sq += double(len) * len;
    }
    double t2 = now_s();
    opt.step();
    sync(model.compute());
    r.optimizer_s += now_s() - t2;
    return std::make_pair(loss_sum, sum_sq);
  };

  r.matmul_flops = measure_matmul_flops(model.compute());
  step();  // warm-up: allocator and kernel selection
  r.forward_s = r.backward_s = r.optimizer_s = 0;
  double t0 = now_s();
  while (r.tokens < o.tokens) {
    auto [loss, sum_sq] = step();
    const int64_t step_tokens = o.seq_len * o.micro_batches;
    r.tokens += step_tokens;
    r.steps += 1;
    r.model_flops += train_flops(cfg, step_tokens, sum_sq);
    r.final_loss = loss;
    if (on_step) on_step(r.steps, loss);
  }
  sync(model.compute());
  r.seconds = now_s() - t0;
  r.tokens_per_s = r.tokens / r.seconds;
  r.achieved_flops = r.model_flops / r.seconds;
  r.mfu = r.achieved_flops / r.matmul_flops;
  model.set_requires_grad(false);
  return r;
}

}  // namespace trellis::model
