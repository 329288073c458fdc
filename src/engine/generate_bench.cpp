#include "engine/generate_bench.h"

#include <chrono>
#include <random>

#include "engine/engine.h"
#include "model/flops.h"
#include "model/paged_attention.h"

namespace trellis::engine {

using model::kBlockSize;
namespace {

std::vector<Request> random_requests(const model::HfConfig& config, const GenerateBenchOptions& o,
                                     int64_t max_tokens, const std::string& tag) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config.vocab_size - 1));
  std::vector<Request> out;
  for (int64_t i = 0; i < o.batch; ++i) {
    Request r;
    r.id = tag + std::to_string(i);
    for (int64_t j = 0; j < o.prompt_len; ++j) r.prompt.push_back(id(rng));
    r.max_tokens = max_tokens;
    r.seed = o.seed + static_cast<uint64_t>(i);
    out.push_back(std::move(r));
  }
  return out;
}

// Bytes a decode step reads: every matmul weight once, and each sequence's cached keys and values
// for its `positions` positions.
double decode_step_bytes(const model::HfConfig& c, int64_t element_bytes, int64_t sequences,
                         int64_t positions) {
  const int64_t kv = c.num_key_value_heads * c.head_dim;
  const double cache = 2.0 * c.num_hidden_layers * kv * double(positions) * sequences;
  return (static_cast<double>(c.num_matmul_parameters()) + cache) * element_bytes;
}

}  // namespace

double measure_read_bandwidth() {
  torch::NoGradGuard no_grad;
  auto buffer = torch::ones({int64_t{128} << 20}, torch::kFloat32);  // 512 MiB
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto total = buffer.sum().item<double>();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (total > 0) best = std::min(best, s);
  }
  return static_cast<double>(buffer.numel()) * sizeof(float) / best;
}

double generate_flops(const model::HfConfig& c, int64_t batch, int64_t prompt_len,
                      int64_t max_tokens) {
  const int64_t q = c.num_attention_heads * c.head_dim;
  const auto matmul_params = static_cast<double>(c.num_matmul_parameters());
  // Fed tokens sit at positions 0 .. prompt_len + max_tokens - 2 (the last sampled token is never
  // fed back); the one at position p attends to p + 1 keys.
  const double fed = prompt_len + max_tokens - 1;
  const double keys = fed * (fed + 1) / 2;
  const double attention = 4.0 * c.num_hidden_layers * q * keys;
  return batch * (2.0 * matmul_params * fed + attention);
}

GenerateBenchResult bench_generate(model::Transformer& model, const GenerateBenchOptions& o,
                                   const std::function<void(int64_t, int64_t)>& on_progress) {
  GenerateBenchResult r;
  r.matmul_flops = model::measure_matmul_flops(model.compute());
  if (model.compute().device.is_cpu()) r.memory_bandwidth = measure_read_bandwidth();
  const int64_t element_bytes = model.compute().dtype == torch::kFloat32 ? 4 : 2;
  EngineOptions eo;
  eo.max_num_seqs = o.batch;
  eo.max_batch_tokens = o.max_batch_tokens;
  eo.fp8 = o.fp8;
  eo.decode_graphs = !o.eager;
  // Room for every sequence at full length: the benchmark measures batching, not preemption.
  eo.kv_cache_tokens = o.batch * ((o.prompt_len + o.max_tokens) / kBlockSize + 2) * kBlockSize;
  Engine engine(model, eo);
  // Warm-up (untimed): weight casts, allocator, GEMM kernel choices for these shapes.
  for (auto& req : random_requests(model.config(), o, 4, "warmup")) engine.add(std::move(req));
  while (engine.has_work()) engine.step();

  for (auto& req : random_requests(model.config(), o, o.max_tokens, "bench")) {
    engine.add(std::move(req));
  }
  const int64_t total = o.batch * o.max_tokens;
  const int64_t generated_before = engine.stats().tokens_generated;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t decode_only_tokens = 0;
  while (engine.has_work()) {
    auto st = engine.step();
    ++r.steps;
    if (st.prefill_tokens > 0) {
      r.prefill_s += st.seconds;
      r.prompt_tokens += st.prefill_tokens;
    } else {
      r.decode_s += st.seconds;
      decode_only_tokens += st.decode_tokens;
      ++r.decode_steps;
      // Sequences advance nearly together: each attends to about this many positions.
      const int64_t generated = engine.stats().tokens_generated - generated_before;
      const int64_t positions = o.prompt_len + generated / o.batch;
      r.decode_bytes +=
          decode_step_bytes(model.config(), element_bytes, st.decode_tokens, positions);
    }
    // The warm-up's tokens are not this run's.
    if (on_progress) on_progress(engine.stats().tokens_generated - generated_before, total);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.generated = total;
  r.decode_graphs = engine.stats().decode_graphs;
  r.tokens_per_s = r.generated / r.seconds;
  r.decode_step_ms = r.decode_steps ? 1e3 * r.decode_s / r.decode_steps : 0;
  r.decode_tokens_per_s = r.decode_s > 0 ? decode_only_tokens / r.decode_s : 0;
  r.model_flops = generate_flops(model.config(), o.batch, o.prompt_len, o.max_tokens);
  r.achieved_flops = r.model_flops / r.seconds;
  r.utilization = r.achieved_flops / r.matmul_flops;
  r.decode_bandwidth = r.decode_s > 0 ? r.decode_bytes / r.decode_s : 0;
  r.bandwidth_fraction = r.memory_bandwidth > 0 ? r.decode_bandwidth / r.memory_bandwidth : 0;
  return r;
}

}  // namespace trellis::engine
