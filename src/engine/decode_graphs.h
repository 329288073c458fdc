// The engine's decode steps replayed from device graphs (model/device_graph.h: CUDA graphs on a
// GPU, where a decode step is otherwise bound by the host launching its kernels one by one).
//
// A step in which every sequence feeds its one new token runs the graph recorded for the
// smallest batch size of a fixed ladder (1, 2, 3, 4, 6, 8, 12, 16, ...: at most a third of the
// rows are padding) that holds it. The step's tokens, positions, slots and block tables are
// copied into buffers that stay put; padding rows decode token 0 at position 0 of a block of the
// cache kept for them, which no sequence ever reads. A size's graph is recorded the first time a
// step needs it, and all are recorded again when the model's buffers moved
// (model::Transformer::buffer_generation: a longer RoPE table, new weight copies) or a sequence
// outgrows the block tables' width (doubled then).
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include <torch/torch.h>

#include "engine/kv_cache.h"
#include "model/device_graph.h"
#include "model/transformer.h"

namespace trellis::engine {

class DecodeGraphs {
 public:
  // Whether decode steps of `model` can be recorded: a device with graphs, where the paged
  // attention of a decode step plans without reading the batch back (the CUDA decode kernel).
  static bool available(const model::Transformer& model);

  // Steps of up to max_tokens tokens. Takes one block of `cache` for the padding rows, for its
  // lifetime (kPaddingBlocks).
  DecodeGraphs(model::Transformer& model, PagedKVCache& cache, int64_t max_tokens);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  static constexpr int64_t kPaddingBlocks = 1;

  int64_t max_tokens() const { return max_tokens_; }

  // One decode step of T tokens, T in [1, max_tokens]: tokens, positions and slots int64 [T] and
  // block tables int32 [T, n] (row t: token t's sequence's blocks), on the CPU. Returns the
  // logits [T, vocab] (fp32) and final hidden rows [T, hidden_size], in buffers that the next run
  // overwrites: read them first.
  model::ForwardOutput run(const torch::Tensor& tokens, const torch::Tensor& positions,
                           const torch::Tensor& slots, const torch::Tensor& tables);

  // Graphs recorded so far, all sizes and generations (for tests and logs).
  int64_t recordings() const { return recordings_; }

 private:
  // The recorded batch size for a step of `tokens` (<= max_tokens_).
  int64_t size_for(int64_t tokens) const;
  // Allocates the block tables' buffer `width` blocks wide; the graphs recorded on the old one go.
  void resize_tables(int64_t width);
  // The forward of a step of `size` rows, from the buffers into the output buffers.
  void forward(int64_t size);

  model::Transformer& model_;
  PagedKVCache& cache_;
  int64_t max_tokens_;
  int32_t padding_block_;
  // Inputs [max_tokens] (rows_ is 0, 1, 2, ...: each token its own row of tables_) and outputs
  // [max_tokens, ...] on the model's device.
  torch::Tensor tokens_, positions_, slots_, rows_, tables_, logits_, hidden_;
  int64_t max_position_ = 0;  // the current step's, for the forward's RoPE tables
  int64_t generation_ = -1;   // the model's buffer_generation the graphs were recorded at
  std::map<int64_t, std::unique_ptr<model::DeviceGraph>> graphs_;  // by batch size
  int64_t recordings_ = 0;
};

}  // namespace trellis::engine
