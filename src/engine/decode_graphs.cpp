#include "engine/decode_graphs.h"

#include <algorithm>

#include "common/error.h"
#include "model/paged_attention.h"

namespace trellis::engine {

namespace {
constexpr int64_t kInitialTableWidth = 64;  // blocks: sequences up to 1,024 tokens
}  // namespace

bool DecodeGraphs::available(const model::Transformer& model) {
  const auto& c = model.compute();
  return model::DeviceGraph::records(c.device) &&
         model::paged_decode_plans_on_device(c.device, c.dtype, model.config().head_dim);
}

DecodeGraphs::DecodeGraphs(model::Transformer& model, PagedKVCache& cache, int64_t max_tokens)
    : model_(model), cache_(cache), max_tokens_(max_tokens) {
  if (max_tokens < 1) fail("decode graphs", "max_tokens must be positive, got {}", max_tokens);
  if (cache.free_blocks() < kPaddingBlocks) fail("decode graphs", "no free block for padding");
  // The last block, out of the way of the sequences' runs of consecutive blocks.
  padding_block_ = cache.allocate(static_cast<int32_t>(cache.num_blocks()) - 2);
  const auto device = model.compute().device;
  const auto ids = torch::TensorOptions().dtype(torch::kInt64).device(device);
  tokens_ = torch::zeros({max_tokens}, ids);
  positions_ = torch::zeros({max_tokens}, ids);
  slots_ = torch::zeros({max_tokens}, ids);
  rows_ = torch::arange(max_tokens, ids);
  logits_ = torch::zeros({max_tokens, model.config().vocab_size},
                         torch::TensorOptions().dtype(torch::kFloat32).device(device));
  hidden_ = torch::zeros({max_tokens, model.config().hidden_size},
                         torch::TensorOptions().dtype(model.compute().dtype).device(device));
  resize_tables(kInitialTableWidth);
}

DecodeGraphs::~DecodeGraphs() {
  graphs_.clear();
  cache_.release(padding_block_);
}

int64_t DecodeGraphs::size_for(int64_t tokens) const {
  // 1, 2, 3, 4, 6, 8, 12, 16, 24, ...: powers of two and the midpoints between them.
  int64_t size = 1;
  while (size < tokens)
    size = size < 2 ? 2 : (size & (size - 1)) == 0 ? size / 2 * 3 : size / 3 * 4;
  return std::min(size, max_tokens_);
}

void DecodeGraphs::resize_tables(int64_t width) {
  graphs_.clear();
  tables_ = torch::zeros({max_tokens_, width},
                         torch::TensorOptions().dtype(torch::kInt32).device(tokens_.device()));
}

void DecodeGraphs::forward(int64_t size) {
  model::PagedBatch batch{slots_.narrow(0, 0, size), positions_.narrow(0, 0, size),
                          rows_.narrow(0, 0, size), tables_.narrow(0, 0, size)};
  batch.decode_only = true;
  const auto out =
      forward_on_cache(model_, cache_, tokens_.narrow(0, 0, size), batch,
                       {.logits = true, .hidden = true, .max_position = max_position_});
  logits_.narrow(0, 0, size).copy_(out.logits);
  hidden_.narrow(0, 0, size).copy_(out.hidden);
}

model::ForwardOutput DecodeGraphs::run(const torch::Tensor& tokens, const torch::Tensor& positions,
                                       const torch::Tensor& slots, const torch::Tensor& tables) {
  constexpr const char* kWhere = "decode graphs";
  const int64_t T = tokens.numel();
  if (T < 1 || T > max_tokens_ || positions.numel() != T || slots.numel() != T ||
      tables.dim() != 2 || tables.size(0) != T) {
    fail(kWhere, "a step of 1 to {} tokens with one position, slot and table row each expected",
         max_tokens_);
  }
  const int64_t size = size_for(T);
  const int64_t width = tables.size(1);
  if (width > tables_.size(1)) {
    int64_t grown = tables_.size(1);
    while (grown < width) grown *= 2;
    resize_tables(grown);
  }

  // This step's inputs, padded to `size` rows, into the buffers the graphs read.
  auto pad = [&](const torch::Tensor& t, int64_t value) {
    auto out = torch::full({size}, value, torch::kInt64);
    out.narrow(0, 0, T).copy_(t);
    return out;
  };
  tokens_.narrow(0, 0, size).copy_(pad(tokens, 0));
  positions_.narrow(0, 0, size).copy_(pad(positions, 0));
  slots_.narrow(0, 0, size).copy_(pad(slots, int64_t{padding_block_} * model::kBlockSize));
  auto padded_tables = torch::zeros({size, tables_.size(1)}, torch::kInt32);
  padded_tables.narrow(0, 0, T).narrow(1, 0, width).copy_(tables);
  padded_tables.narrow(0, T, size - T).select(1, 0).fill_(padding_block_);
  tables_.narrow(0, 0, size).copy_(padded_tables);

  // What the forward reads besides the buffers must be current and where the graphs read it.
  max_position_ = positions.max().item<int64_t>();
  model_.reserve_positions(max_position_);
  model_.refresh_weight_copies();
  if (model_.buffer_generation() != generation_) graphs_.clear();

  auto it = graphs_.find(size);
  if (it == graphs_.end()) {
    // Share the pool of any graph recorded before: steps never run two at once.
    const model::DeviceGraph* other = graphs_.empty() ? nullptr : graphs_.begin()->second.get();
    auto graph = std::make_unique<model::DeviceGraph>(
        tokens_.device(), [this, size] { forward(size); }, other);
    ++recordings_;
    graphs_.emplace(size, std::move(graph));  // recording ran the step once
    // After the recording: its first run may have made the weight copies the graph reads.
    generation_ = model_.buffer_generation();
  } else {
    it->second->replay();
  }
  return {logits_.narrow(0, 0, T), hidden_.narrow(0, 0, T)};
}

}  // namespace trellis::engine
