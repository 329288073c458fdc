// Proof building and the wire format: the polynomial commits to exactly the top-k points, the
// injective modulus against its definition, chunking, determinism, and fail-closed parsing.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "common/hashing.h"
#include "error_of.h"
#include "toploc/polynomial.h"
#include "toploc/proof.h"
#include "toploc/topk.h"
#include "toploc_test_util.h"

namespace trellis::toploc {
namespace {

bool distinct_mod(const std::vector<uint32_t>& idx, uint32_t m) {
  std::set<uint32_t> r;
  for (uint32_t i : idx) r.insert(i % m);
  return r.size() == idx.size();
}

TEST(Proof, InjectiveModulusIsTheLargestThatKeepsIndicesDistinct) {
  EXPECT_EQ(injective_modulus(std::vector<uint32_t>{0, 1, 65496}), kPrime);
  EXPECT_EQ(injective_modulus(std::vector<uint32_t>{0, 65497}), 65496u);
  EXPECT_EQ(injective_modulus(std::vector<uint32_t>{0, 65497, 65496}), 65495u);
  EXPECT_EQ(injective_modulus(std::vector<uint32_t>{5}), kPrime);
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 20; ++trial) {
    std::set<uint32_t> s;
    while (s.size() < 128) s.insert(static_cast<uint32_t>(rng() % (32 * 8192)));
    const std::vector<uint32_t> idx(s.begin(), s.end());
    const uint32_t m = injective_modulus(idx);
    ASSERT_TRUE(distinct_mod(idx, m));
    for (uint32_t larger = m + 1; larger <= kPrime; ++larger) {
      ASSERT_FALSE(distinct_mod(idx, larger)) << larger;
    }
  }
  EXPECT_NE(test::error_of([] {
              injective_modulus(std::vector<uint32_t>{3, 3});
            }).find("no modulus"),
            std::string::npos);
}

TEST(Proof, ChunkProofInterpolatesTheTopKValues) {
  const size_t H = 4096, rows = 32, k = 128;
  std::vector<uint16_t> chunk = test::random_rows(rows * H, 1);
  // Two of the top values 65497 apart collide mod p, so the modulus must drop below p.
  chunk[100] = test::to_bf16(50.0f);
  chunk[100 + kPrime] = test::to_bf16(-60.0f);
  const ChunkProof proof = prove_chunk(chunk, k);
  ASSERT_EQ(proof.coeffs.size(), k);
  EXPECT_LT(proof.modulus, kPrime);
  const TopK top = top_k(chunk, k, "test");
  for (size_t i = 0; i < k; ++i) {
    EXPECT_EQ(proof.at(top.indices[i]), top.values[i]) << i;
  }
  EXPECT_EQ(distinct_mod(top.indices, proof.modulus), true);
}

TEST(Proof, EncodingIsModulusThenCoefficientsBigEndian) {
  ChunkProof p{0xFFD9, {0x0102, 0xA0B0, 0, 65496}};
  const std::string bytes = encode_chunk_proof(p);
  EXPECT_EQ(to_hex(bytes), "ffd90102a0b00000ffd8");
  EXPECT_EQ(parse_chunk_proof(bytes, 4, "test"), p);
  const std::vector<uint16_t> chunk = test::random_rows(32 * 256, 9);
  const std::string full = build_proof(chunk, 256);
  EXPECT_EQ(full.size(), 258u);
  EXPECT_EQ(parse_chunk_proof(full, 128, "test"), prove_chunk(chunk, 128));
}

TEST(Proof, SequenceIsOneChunkProofPer32Rows) {
  const size_t H = 160;
  const std::vector<uint16_t> all = test::random_rows(100 * H, 4);
  for (size_t n : {0, 1, 31, 32, 33, 64, 65, 100}) {
    const std::span<const uint16_t> rows(all.data(), n * H);
    const std::string proof = build_proof(rows, H);
    const size_t chunks = (n + 31) / 32;
    ASSERT_EQ(proof.size(), chunks * 258) << n;
    ASSERT_EQ(chunk_count(n, 32), chunks);
    const std::vector<ChunkProof> parsed = parse_proof(proof, {}, "test");
    ASSERT_EQ(parsed.size(), chunks);
    for (size_t c = 0; c < chunks; ++c) {
      const size_t first = c * 32, len = std::min<size_t>(32, n - first);
      EXPECT_EQ(parsed[c], prove_chunk(rows.subspan(first * H, len * H), 128)) << n << " " << c;
    }
  }
  // Chunk size and k are parameters.
  const std::string small = build_proof(std::span<const uint16_t>(all.data(), 10 * H), H, {16, 3});
  EXPECT_EQ(small.size(), 4u * (2 + 2 * 16));
}

TEST(Proof, IsDeterministicAndTiesGoToTheLowerIndex) {
  // Every value has the same magnitude: the committed points must be indices 0..k-1, whatever
  // their signs, so the proof equals the interpolation of exactly those points.
  const size_t k = 8;
  std::vector<uint16_t> chunk(64);
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = (i * 7) % 3 == 0 ? 0xBF80 : 0x3F80;
  const ChunkProof proof = prove_chunk(chunk, k);
  std::vector<uint32_t> x, y;
  for (uint32_t i = 0; i < k; ++i) {
    x.push_back(i);
    y.push_back(chunk[i]);
  }
  EXPECT_EQ(proof.modulus, kPrime);
  EXPECT_EQ(proof.coeffs, interpolate(x, y));
  // Same input, same bytes; and a different tie pattern beyond index k-1 changes nothing.
  EXPECT_EQ(encode_chunk_proof(prove_chunk(chunk, k)), encode_chunk_proof(proof));
  std::vector<uint16_t> other = chunk;
  for (size_t i = k; i < other.size(); ++i) other[i] ^= 0x8000;
  EXPECT_EQ(prove_chunk(other, k), proof);
  // But flipping the sign of a committed value does change it.
  other[3] ^= 0x8000;
  EXPECT_NE(prove_chunk(other, k), proof);
}

TEST(Proof, RefusesNonFiniteRowsAndBadShapes) {
  const size_t H = 64;
  std::vector<uint16_t> rows = test::random_rows(40 * H, 6);
  rows[37 * H + 3] = 0x7FC0;
  const std::string e = test::error_of([&] { build_proof(rows, H); });
  EXPECT_NE(e.find("NaN (0x7fc0) at row 37, column 3"), std::string::npos) << e;
  EXPECT_NE(e.find("chunk 1"), std::string::npos) << e;
  EXPECT_NE(test::error_of([&] { build_proof(rows, 0); }).find("hidden size"), std::string::npos);
  EXPECT_NE(test::error_of([&] {
              build_proof(std::span(rows).first(65), H);
            }).find("not a whole number of rows"),
            std::string::npos);
  // A last chunk with fewer than k values (1 row of 64 < k = 128).
  const std::vector<uint16_t> ok = test::random_rows(33 * H, 6);
  EXPECT_NE(test::error_of([&] { build_proof(ok, H); }).find("64 values, fewer than k = 128"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              build_proof(ok, H, {128, 0});
            }).find("chunk_rows"),
            std::string::npos);
}

TEST(Proof, ParsingIsFailClosed) {
  const std::string good = build_proof(test::random_rows(32 * 128, 8), 128);
  ASSERT_EQ(good.size(), 258u);
  ASSERT_NO_THROW(parse_chunk_proof(good, 128, "p"));
  auto error = [](const std::string& bytes, size_t k = 128) {
    return test::error_of([&] { parse_chunk_proof(bytes, k, "worker 7 proof"); });
  };
  EXPECT_NE(error(good.substr(0, 257)).find("257 bytes, expected 258"), std::string::npos);
  EXPECT_NE(error(good + '\0').find("259 bytes, expected 258"), std::string::npos);
  EXPECT_NE(error("").find("0 bytes"), std::string::npos);
  EXPECT_NE(error(good, 4).find("expected 10 (k = 4)"), std::string::npos);
  std::string bad = good;
  bad[0] = 0, bad[1] = 0;  // modulus 0: the reference's "null proof"
  EXPECT_NE(error(bad).find("modulus 0 is outside 1..65497"), std::string::npos);
  bad[0] = '\xff', bad[1] = '\xda';
  EXPECT_NE(error(bad).find("modulus 65498"), std::string::npos);
  bad[0] = 0, bad[1] = 1;  // modulus 1 is legal
  EXPECT_EQ(error(bad), "");
  bad = good;
  bad[2 + 2 * 77] = '\xff', bad[2 + 2 * 77 + 1] = '\xd9';
  EXPECT_NE(error(bad).find("coefficient 77 is 65497, not below 65497"), std::string::npos);
  bad[2 + 2 * 77 + 1] = '\xff';
  EXPECT_NE(error(bad).find("coefficient 77 is 65535"), std::string::npos);
  EXPECT_NE(error(bad).find("(worker 7 proof)"), std::string::npos);

  auto seq_error = [](const std::string& bytes) {
    return test::error_of([&] { parse_proof(bytes, {}, "proof"); });
  };
  EXPECT_NE(seq_error(good + good.substr(0, 100)).find("358 bytes, not a whole number"),
            std::string::npos);
  bad = good + good;
  bad[258] = 0, bad[259] = 0;
  EXPECT_NE(seq_error(bad).find("chunk 1"), std::string::npos);
  EXPECT_EQ(parse_proof("", {}, "proof").size(), 0u);
}

// A proof's size is checked before anything is allocated for its chunks.
TEST(Proof, RefusesProofsOverTheSizeLimit) {
  std::string chunk(258, '\0');
  chunk[1] = 1;  // modulus 1, coefficients 0: a well-formed chunk proof
  std::string proof;
  const size_t chunks = kMaxProofBytes / chunk.size() + 1;
  proof.reserve(chunks * chunk.size());
  for (size_t c = 0; c < chunks; ++c) proof += chunk;
  const std::string msg = test::error_of([&] { parse_proof(proof, {}, "worker proof"); });
  EXPECT_NE(msg.find("more than the limit of 17825792"), std::string::npos) << msg;
  EXPECT_NE(msg.find("worker proof"), std::string::npos) << msg;
  EXPECT_EQ(parse_proof(proof.substr(0, (chunks - 1) * chunk.size()), {}, "p").size(), chunks - 1);
}

}  // namespace
}  // namespace trellis::toploc
