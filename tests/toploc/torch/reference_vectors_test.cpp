// The public reference's own example (toploc README, specs/toploc.md §2): inputs from torch's CPU
// generator with seed 42, a bf16 randn(5, 16) prefill as its own chunk, then ten randn(16) decode
// rows in chunks of 3, k = 4. Our proofs must equal the published bytes.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/hashing.h"
#include "toploc/proof.h"
#include "toploc/proof_builder.h"

namespace trellis::toploc {
namespace {

TEST(ReferenceVectors, ReadmeExampleReproducesByteForByte) {
  torch::manual_seed(42);
  const torch::Tensor prefill = torch::randn({5, 16}, torch::kBFloat16);
  std::vector<torch::Tensor> decode;
  for (int i = 0; i < 10; ++i) decode.push_back(torch::randn({16}, torch::kBFloat16));

  std::vector<std::string> got;
  got.push_back(to_hex(encode_chunk_proof(prove_chunk(bf16_bits(prefill), 4))));
  const std::vector<uint16_t> rows = bf16_bits(torch::stack(decode));
  const std::string proof = build_proof(rows, 16, {4, 3});
  for (size_t c = 0; c * 10 < proof.size(); ++c) got.push_back(to_hex(proof.substr(c * 10, 10)));

  const std::vector<std::string> want = {"ffd91b422b67ba4b756d", "ffd9cbb89af1862554a0",
                                         "ffd9b468dae6e4ab41b6", "ffd98064d65830e2af73",
                                         "ffd9d20464ea9191f6d7"};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace trellis::toploc
