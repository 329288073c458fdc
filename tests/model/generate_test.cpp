// Simple generation: greedy tokens equal the argmax of an independent full forward, stop ids end
// a completion with reason "stop", seeds make sampling reproducible, vocab_limit is honoured.
#include "model/generate.h"

#include <gtest/gtest.h>

#include "model/presets.h"

namespace trellis::model {
namespace {

std::unique_ptr<Transformer> tiny_model() {
  auto m = std::make_unique<Transformer>(preset_config(Arch::Llama, "tiny"), Compute{});
  m->init_random(11);
  return m;
}

TEST(Generate, GreedyMatchesFullForwardArgmax) {
  auto m = tiny_model();
  std::vector<int32_t> prompt = {10, 20, 30, 40};
  auto gen = generate(*m, prompt, {}, {.max_tokens = 10, .temperature = 0});
  ASSERT_EQ(gen.tokens.size(), 10u);
  EXPECT_EQ(gen.finish_reason, "length");
  std::vector<int64_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), gen.tokens.begin(), gen.tokens.end());
  torch::NoGradGuard g;
  auto logits = m->forward(torch::tensor(all, torch::kInt64)).logits;
  for (size_t i = 0; i < gen.tokens.size(); ++i) {
    EXPECT_EQ(logits[prompt.size() - 1 + i].argmax().item<int64_t>(), gen.tokens[i]) << i;
  }
}

TEST(Generate, StopIdsSeedsAndVocabLimit) {
  auto m = tiny_model();
  std::vector<int32_t> prompt = {1, 2, 3};
  auto a = generate(*m, prompt, {}, {.max_tokens = 20, .temperature = 1.0, .seed = 4});
  auto b = generate(*m, prompt, {}, {.max_tokens = 20, .temperature = 1.0, .seed = 4});
  auto c = generate(*m, prompt, {}, {.max_tokens = 20, .temperature = 1.0, .seed = 5});
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
  // Stopping on the 3rd sampled token ends there, with reason "stop".
  auto stopped =
      generate(*m, prompt, {a.tokens[2]}, {.max_tokens = 20, .temperature = 1.0, .seed = 4});
  ASSERT_LE(stopped.tokens.size(), 3u);
  EXPECT_EQ(stopped.tokens.back(), a.tokens[2]);
  EXPECT_EQ(stopped.finish_reason, "stop");
  auto limited = generate(*m, prompt, {}, {.max_tokens = 50, .temperature = 2.0, .vocab_limit = 7});
  for (int32_t id : limited.tokens) EXPECT_LT(id, 7);
}

}  // namespace
}  // namespace trellis::model
