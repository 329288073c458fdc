// Verification: honest rows pass with zero error, honest-like noise stays under the strict
// thresholds, other rows (fresh values, shifted, scaled, tampered proofs) are rejected with a
// readable reason, and the statistics (upper median, +inf) follow the spec on crafted chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "error_of.h"
#include "toploc/proof.h"
#include "toploc/verify.h"
#include "toploc_test_util.h"

namespace trellis::toploc {
namespace {

constexpr size_t H = 512;

std::vector<uint16_t> scaled(const std::vector<uint16_t>& rows, float factor) {
  std::vector<uint16_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    out[i] = test::to_bf16(test::from_bf16(rows[i]) * factor);
  return out;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Verify, HonestRowsPassWithZeroError) {
  const std::vector<uint16_t> rows = test::random_rows(70 * H, 1);
  const std::string proof = build_proof(rows, H);
  const Verdict v = verify_proof(proof, rows, H, Thresholds::strict());
  EXPECT_TRUE(v.accepted) << v.reason;
  EXPECT_EQ(v.reason, "");
  ASSERT_EQ(v.chunks.size(), 3u);
  for (const ChunkVerdict& c : v.chunks) {
    EXPECT_TRUE(c.passed);
    EXPECT_EQ(c.stats.exp_mismatches, 0u);
    EXPECT_EQ(c.stats.mant_err_mean, 0.0);
    EXPECT_EQ(c.stats.mant_err_median, 0.0);
  }
  // Other shapes: small k and chunk sizes.
  const ProofConfig small{4, 3};
  const std::string p2 = build_proof(std::span(rows).first(10 * H), H, small);
  EXPECT_TRUE(
      verify_proof(p2, std::span(rows).first(10 * H), H, Thresholds::strict(), small).accepted);
}

TEST(Verify, LowestMantissaBitNoiseStaysUnderStrictThresholds) {
  const std::vector<uint16_t> rows = test::random_rows(64 * H, 2);
  const std::string proof = build_proof(rows, H);
  std::vector<uint16_t> noisy = rows;
  std::mt19937_64 rng(3);
  size_t flipped = 0;
  for (auto& v : noisy) {
    if (rng() % 4 == 0) {  // a quarter of all values, top-k included
      v ^= 1;
      ++flipped;
    }
  }
  ASSERT_GT(flipped, noisy.size() / 5);
  const Verdict v = verify_proof(proof, noisy, H, Thresholds::strict());
  EXPECT_TRUE(v.accepted) << v.reason;
  for (const ChunkVerdict& c : v.chunks) {
    EXPECT_LE(c.stats.exp_mismatches, 5u);
    EXPECT_GT(c.stats.mant_err_mean, 0.0);
    EXPECT_LE(c.stats.mant_err_mean, 1.0);
    EXPECT_LE(c.stats.mant_err_median, 1.0);
  }
}

TEST(Verify, OtherRowsAreRejected) {
  const std::vector<uint16_t> rows = test::random_rows(64 * H, 4);
  const std::string proof = build_proof(rows, H);

  // Fresh values from another "model": the top-k sets disagree.
  const Verdict fresh = verify_proof(proof, test::random_rows(64 * H, 5), H, Thresholds::loose());
  EXPECT_FALSE(fresh.accepted);
  EXPECT_TRUE(contains(fresh.reason, "2 of 2 chunks failed")) << fresh.reason;
  EXPECT_TRUE(contains(fresh.reason, "chunk 0: ")) << fresh.reason;
  EXPECT_TRUE(contains(fresh.reason, "exponent mismatches > 60")) << fresh.reason;
  for (const ChunkVerdict& c : fresh.chunks) EXPECT_GT(c.stats.exp_mismatches, 100u);

  // The same values one position later (an off-by-one in the rows the worker committed).
  std::vector<uint16_t> shifted(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) shifted[i] = rows[(i + 1) % rows.size()];
  const Verdict shift = verify_proof(proof, shifted, H, Thresholds::loose());
  EXPECT_FALSE(shift.accepted);
  EXPECT_TRUE(contains(shift.reason, "exponent mismatches")) << shift.reason;

  // Scaled by 1.1 (other weights, same top-k): exponents mostly agree, mantissas do not.
  const Verdict scale = verify_proof(proof, scaled(rows, 1.1f), H, Thresholds::strict());
  EXPECT_FALSE(scale.accepted);
  EXPECT_TRUE(contains(scale.reason, "mantissa error mean")) << scale.reason;
  for (const ChunkVerdict& c : scale.chunks) EXPECT_GT(c.stats.mant_err_mean, 10.0);

  // Scaled by 4: every exponent differs, no mantissa to compare.
  const Verdict x4 = verify_proof(proof, scaled(rows, 4.0f), H, Thresholds::loose());
  EXPECT_FALSE(x4.accepted);
  for (const ChunkVerdict& c : x4.chunks) {
    EXPECT_EQ(c.stats.exp_mismatches, 128u);
    EXPECT_TRUE(std::isinf(c.stats.mant_err_mean));
    EXPECT_TRUE(std::isinf(c.stats.mant_err_median));
  }
  EXPECT_TRUE(contains(x4.reason, "128 exponent mismatches > 60; no exponent matched"))
      << x4.reason;

  // A tampered coefficient (still a valid encoding).
  std::string tampered = proof;
  tampered[258 + 2 + 2 * 5 + 1] ^= 1;
  const Verdict t = verify_proof(tampered, rows, H, Thresholds::loose());
  EXPECT_FALSE(t.accepted);
  EXPECT_TRUE(contains(t.reason, "1 of 2 chunks failed: chunk 1: ")) << t.reason;
  EXPECT_TRUE(t.chunks[0].passed);
}

TEST(Verify, ProofOfTheWrongShapeIsRejectedWithAReason) {
  const std::vector<uint16_t> rows = test::random_rows(40 * H, 6);
  const std::string proof = build_proof(rows, H);
  ASSERT_EQ(proof.size(), 2 * 258u);
  auto reason = [&](const std::string& p) {
    const Verdict v = verify_proof(p, rows, H, Thresholds::loose());
    EXPECT_FALSE(v.accepted);
    EXPECT_TRUE(v.chunks.empty());
    return v.reason;
  };
  EXPECT_EQ(reason(""), "empty proof for 40 rows (expected 2 chunk proofs)");
  EXPECT_EQ(reason(proof.substr(0, 258)),
            "proof has 1 chunk proofs but the 40 rows make 2 chunks of 32");
  EXPECT_TRUE(contains(reason(proof + proof.substr(0, 258)), "proof has 3 chunk proofs"));
  EXPECT_TRUE(contains(reason(proof.substr(0, 300)), "300 bytes, not a whole number"));
  std::string null_proof = proof;
  null_proof[258] = 0, null_proof[259] = 0;
  EXPECT_TRUE(contains(reason(null_proof), "modulus 0 is outside 1..65497 (proof, chunk 1)"));
  // No rows (a completion of <= 1 token): only the empty proof is right.
  const Verdict none = verify_proof("", {}, H, Thresholds::strict());
  EXPECT_TRUE(none.accepted);
  EXPECT_FALSE(verify_proof(proof.substr(0, 258), {}, H, Thresholds::strict()).accepted);
  // The caller's own mistakes are Errors, not verdicts.
  EXPECT_TRUE(contains(test::error_of([&] { verify_proof(proof, rows, 0, Thresholds::strict()); }),
                       "hidden size"));
  EXPECT_TRUE(contains(test::error_of([&] {
                         verify_proof(proof, std::span(rows).first(5), H, Thresholds::strict());
                       }),
                       "not a whole number of rows"));
}

TEST(Verify, NonFiniteValidatorRowsRejectTheChunk) {
  std::vector<uint16_t> rows = test::random_rows(40 * H, 7);
  const std::string proof = build_proof(rows, H);
  rows[35 * H + 9] = 0xFF80;
  const Verdict v = verify_proof(proof, rows, H, Thresholds::loose());
  EXPECT_FALSE(v.accepted);
  EXPECT_TRUE(v.chunks[0].passed);
  EXPECT_FALSE(v.chunks[1].passed);
  EXPECT_TRUE(
      contains(v.reason, "chunk 1: cannot commit to a non-finite value: -Inf at row 35, column 9"))
      << v.reason;
}

TEST(Verify, StatisticsUseTheUpperMedianAndTheMean) {
  // Four dominant values with exponent 3..6 and mantissa 0; the validator's copies differ in the
  // mantissa by 0, 1, 2, 3: mean 1.5, upper median sorted[2] = 2.
  std::vector<uint16_t> chunk(64, test::to_bf16(0.25f));
  const uint16_t big[] = {0x4100, 0x4180, 0x4200, 0x4280};  // 8, 16, 32, 64
  for (int i = 0; i < 4; ++i) chunk[10 * i + 3] = big[i];
  const ChunkProof proof = prove_chunk(chunk, 4);
  std::vector<uint16_t> mine = chunk;
  for (int i = 0; i < 4; ++i) mine[10 * i + 3] = static_cast<uint16_t>(big[i] + i);
  ChunkStats s = chunk_stats(proof, mine);
  EXPECT_EQ(s.exp_mismatches, 0u);
  EXPECT_DOUBLE_EQ(s.mant_err_mean, 1.5);
  EXPECT_DOUBLE_EQ(s.mant_err_median, 2.0);
  // One exponent off (64 -> 128): three mantissa errors 0, 1, 2 remain, median sorted[1] = 1.
  mine[33] = 0x4300;
  s = chunk_stats(proof, mine);
  EXPECT_EQ(s.exp_mismatches, 1u);
  EXPECT_DOUBLE_EQ(s.mant_err_mean, 1.0);
  EXPECT_DOUBLE_EQ(s.mant_err_median, 1.0);
  // A sign flip is not an exponent mismatch: the sign bit is outside 0x7F80.
  mine = chunk;
  mine[3] ^= 0x8000;
  s = chunk_stats(proof, mine);
  EXPECT_EQ(s.exp_mismatches, 0u);
  EXPECT_DOUBLE_EQ(s.mant_err_mean, 0.0);
}

TEST(Verify, JudgeNamesEveryViolatedThreshold) {
  const Thresholds strict = Thresholds::strict();
  EXPECT_TRUE(judge_chunk(0, {38, 10, 8}, strict).passed);  // at the threshold passes
  ChunkVerdict v = judge_chunk(3, {57, 1, 1}, strict);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.reason, "chunk 3: 57 exponent mismatches > 38");
  v = judge_chunk(2, {0, 10.5, 9}, strict);
  EXPECT_EQ(v.reason, "chunk 2: mantissa error mean 10.50 > 10; mantissa error median 9 > 8");
  v = judge_chunk(1, {4, INFINITY, INFINITY}, Thresholds::loose());
  EXPECT_EQ(v.reason, "chunk 1: no exponent matched, mantissa error is infinite");
  EXPECT_EQ(Thresholds::named("loose", "cfg").exp_mismatches, 60u);
  EXPECT_EQ(Thresholds::named("strict", "cfg").mant_err_median, 8.0);
  EXPECT_TRUE(contains(test::error_of([] { Thresholds::named("lax", "validator.thresholds"); }),
                       "unknown TOPLOC thresholds 'lax'"));
}

}  // namespace
}  // namespace trellis::toploc
