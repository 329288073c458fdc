// Generation throughput benchmark behind `trellis bench generate`: `batch` concurrent requests of
// random prompts through the engine (continuous batching, paged KV cache), each generating exactly
// max_tokens tokens, reported as tokens/s, time per decode step, FLOP utilisation against the
// matmul rate measured in the same run, and (decoding being memory-bound) the bytes each decode
// step must read against the streaming-read rate measured in the same run.
#pragma once

#include <cstdint>
#include <functional>

#include "model/transformer.h"

namespace trellis::engine {

struct GenerateBenchOptions {
  int64_t batch = 64;        // concurrent sequences
  int64_t prompt_len = 128;  // tokens per prompt
  int64_t max_tokens = 256;  // tokens generated per sequence (no stop ids)
  int64_t max_batch_tokens = 4096;
  uint64_t seed = 0;
  bool fp8 = false;    // the engine's linear layers in FP8 (EngineOptions::fp8)
  bool eager = false;  // every step op by op: no decode graphs (EngineOptions::decode_graphs)
};

struct GenerateBenchResult {
  int64_t generated = 0, prompt_tokens = 0, steps = 0, decode_steps = 0;
  int64_t decode_graphs = 0;  // device graphs recorded (warm-up included); 0: op by op
  double seconds = 0;         // first step to last
  double tokens_per_s = 0;    // generated tokens / seconds (prefill included)
  double prefill_s = 0;       // steps that fed prompt tokens
  double decode_s = 0;        // steps that only decoded
  double decode_step_ms = 0;  // mean time of a decode-only step
  double decode_tokens_per_s = 0;
  double model_flops = 0, achieved_flops = 0, matmul_flops = 0, utilization = 0;
  double decode_bytes = 0;        // weights + cached keys/values read by the decode-only steps
  double decode_bandwidth = 0;    // decode_bytes / decode_s
  double memory_bandwidth = 0;    // streaming-read rate measured in the same run (bytes/s)
  double bandwidth_fraction = 0;  // decode_bandwidth / memory_bandwidth
};

// The rate at which the compute threads read a buffer far larger than the caches (bytes/s): the
// best of several sums over 512 MiB of fp32. The roofline of decoding, which streams the weights
// and the KV cache once per step.
double measure_read_bandwidth();

// Forward FLOPs of generating: 2 * matmul parameters per fed token, plus attention (QK^T and PV)
// of each fed token over its prefix.
double generate_flops(const model::HfConfig& config, int64_t batch, int64_t prompt_len,
                      int64_t max_tokens);

GenerateBenchResult bench_generate(
    model::Transformer& model, const GenerateBenchOptions& options,
    const std::function<void(int64_t done, int64_t total)>& on_progress = {});

}  // namespace trellis::engine
