// Proofs built while the rollout engine decodes, checked as a validator checks them: one prefill
// of prompt + completion with the claimed weights (specs/toploc.md §1, §3). Honest completions
// pass under the strict thresholds in bf16 and fp32; the same completions recomputed with other
// weights fail.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "engine/engine.h"
#include "error_of.h"
#include "model/presets.h"
#include "toploc/proof_builder.h"
#include "toploc/recompute.h"
#include "toploc/verify.h"

namespace trellis::toploc {
namespace {

std::unique_ptr<model::Transformer> tiny_model(torch::ScalarType dtype, uint64_t seed) {
  auto cfg = model::preset_config(model::Arch::Qwen3, "tiny");
  auto m = std::make_unique<model::Transformer>(cfg, model::Compute{torch::kCPU, dtype});
  m->init_random(seed);
  return m;
}

engine::Request request(const std::string& id, int64_t prompt_len, int64_t max_tokens) {
  engine::Request r;
  r.id = id;
  for (int64_t i = 0; i < prompt_len; ++i)
    r.prompt.push_back(static_cast<int32_t>(7 + i * 13 % 200));
  r.n = 2;
  r.seed = static_cast<uint64_t>(prompt_len);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 1.0;
  r.hidden_states = true;
  return r;
}

class ProofsWhileDecoding : public testing::TestWithParam<torch::ScalarType> {};

TEST_P(ProofsWhileDecoding, VerifyAgainstOnePrefillAndFailWithOtherWeights) {
  const auto dtype = GetParam();
  auto model = tiny_model(dtype, 1);
  const auto hidden = static_cast<size_t>(model->config().hidden_size);
  ProofBuilder proofs;
  engine::Engine engine(*model, {});
  engine.set_hidden_sink([&](engine::HiddenRow r) {
    proofs.add(completion_key(r.request_id, r.index), r.token_index, r.row);
  });
  std::vector<engine::Completion> done;
  // One completion per chunk boundary case: under one chunk, exactly two, and a partial third;
  // several in one batch, so decode rows come from batched forwards.
  for (const auto& [id, prompt, tokens] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"a", 5, 20}, {"b", 11, 65}, {"c", 3, 80}}) {
    engine.add(request(id, prompt, tokens),
               {.on_finish = [&](engine::Completion c) { done.push_back(std::move(c)); }});
  }
  while (engine.has_work()) engine.step();
  ASSERT_EQ(done.size(), 6u);

  auto other = tiny_model(dtype, 2);
  uint32_t worst_exp = 0;
  double worst_mean = 0;
  for (const auto& c : done) {
    const auto n = static_cast<int64_t>(c.tokens.size());
    const std::string proof = proofs.take(completion_key(c.request_id, c.index), n - 1);
    EXPECT_EQ(proof.size(), chunk_count(static_cast<size_t>(n - 1), 32) * 258);
    const auto rows = committed_rows(*model, c.prompt, c.tokens);
    ASSERT_EQ(rows.size(), static_cast<size_t>(n - 1) * hidden);
    const Verdict honest = verify_proof(proof, rows, hidden, Thresholds::strict());
    EXPECT_TRUE(honest.accepted) << c.request_id << ": " << honest.reason;
    for (const auto& chunk : honest.chunks) {
      worst_exp = std::max(worst_exp, chunk.stats.exp_mismatches);
      worst_mean = std::max(worst_mean, chunk.stats.mant_err_mean);
    }
    const Verdict forged = verify_proof(proof, committed_rows(*other, c.prompt, c.tokens), hidden,
                                        Thresholds::loose());
    EXPECT_FALSE(forged.accepted) << c.request_id;
  }
  EXPECT_EQ(proofs.held(), 0u);
  std::cout << "honest maxima over every chunk: " << worst_exp << " exponent mismatches, mantissa "
            << "error mean " << worst_mean << "\n";
  // Decode and prefill differ only by rounding: far inside the strict thresholds (38 / 10).
  EXPECT_LE(worst_exp, 10u);
  EXPECT_LE(worst_mean, 3.0);
}

INSTANTIATE_TEST_SUITE_P(ComputeDtypes, ProofsWhileDecoding,
                         testing::Values(torch::kBFloat16, torch::kFloat32));

TEST(ProofBuilder, RowsOutOfOrderOrMissingGiveAnErrorNamingTheCompletion) {
  ProofBuilder proofs;
  const auto row = torch::randn({128});
  proofs.add("r#0", 0, row);
  proofs.add("r#0", 2, row);  // row 1 never came
  EXPECT_NE(test::error_of([&] { proofs.take("r#0", 3, 1); }).find("r#0"), std::string::npos);
  proofs.add("s#1", 0, row);
  EXPECT_NE(test::error_of([&] { proofs.take("s#1", 2, 0.05); }).find("did not arrive"),
            std::string::npos);
  proofs.forget("s#1");
  EXPECT_EQ(proofs.held(), 0u);
  // Rows that cannot be committed to (NaN) break the completion.
  auto bad = torch::randn({128});
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  proofs.add("t#0", 0, bad);
  EXPECT_NE(test::error_of([&] { proofs.take("t#0", 1, 1); }).find("non-finite"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::toploc
