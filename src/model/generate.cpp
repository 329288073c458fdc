#include "model/generate.h"

#include <algorithm>

#include "common/error.h"

namespace trellis::model {

Generation generate(Transformer& model, const std::vector<int32_t>& prompt,
                    const std::vector<int64_t>& stop_ids, const GenerateOptions& options,
                    const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw Error("the prompt must hold at least one token");
  if (options.max_tokens < 0) throw Error("max_tokens must be >= 0");
  if (options.temperature < 0) throw Error("temperature must be >= 0");
  const int64_t limit = model.config().max_position_embeddings;
  if (static_cast<int64_t>(prompt.size()) >= limit) {
    throw Error(
        fmt::format("prompt of {} tokens does not fit the context of {}", prompt.size(), limit));
  }
  torch::NoGradGuard no_grad;
  const int64_t capacity =
      std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()) + options.max_tokens);
  KVCache cache(model.config(), 1, capacity, model.compute());
  auto gen = at::detail::createCPUGenerator(options.seed);

  Generation out;
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  while (static_cast<int64_t>(out.tokens.size()) < options.max_tokens &&
         cache.length() + input.size(1) <= capacity) {
    auto logits = model.forward_step(input, cache).logits[0][-1].to(torch::kCPU);
    if (options.vocab_limit > 0 && options.vocab_limit < logits.size(0)) {
      logits = logits.narrow(0, 0, options.vocab_limit);
    }
    int64_t next;
    if (options.temperature == 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto probs = torch::softmax(logits / options.temperature, -1);
      next = at::multinomial(probs, 1, false, gen).item<int64_t>();
    }
    out.tokens.push_back(static_cast<int32_t>(next));
    if (on_token) on_token(static_cast<int32_t>(next));
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
      out.finish_reason = "stop";
      return out;
    }
    input = torch::tensor({next}, torch::kInt64).unsqueeze(0);
  }
  out.finish_reason = "length";
  return out;
}

}  // namespace trellis::model
