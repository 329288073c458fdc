// Decompression bombs: small hostile rollout files that would expand to gigabytes or terabytes
// (a dictionary entry repeated by RLE indices, one zstd page referenced by many row groups, huge
// pages, level runs, row counts, footers) must fail fast with an Error naming the decode-budget
// limit they exceed. Each decodes in a child process whose address space may grow by only 1 GiB,
// so a decoder that allocates the expanded size fails there (bad_alloc) instead of passing.
#include <gtest/gtest.h>

#include "hostile_file.h"

namespace trellis::rollout {
namespace {

using namespace hostile;

// Expects the child's decode to end in an Error that names `limit` and the file.
void expect_budget_error(const std::string& bytes, const std::string& limit,
                         const std::string& also = "") {
  const std::string result = decode_in_child(bytes);
  ASSERT_EQ(result.rfind("error: ", 0), 0u) << "expected an Error, got: " << result;
  EXPECT_NE(result.find(limit), std::string::npos) << result;
  EXPECT_NE(result.find("bomb.parquet"), std::string::npos) << result;
  if (!also.empty()) EXPECT_NE(result.find(also), std::string::npos) << result;
}

TEST(DecodeBomb, BenignHandBuiltFilesDecode) {
  // The builder's files are valid: the bombs below differ from these in one column or count.
  EXPECT_EQ(decode_in_child(build_file(benign_chunks(1000), 1000, 1)), "ok 1000");
  EXPECT_EQ(decode_in_child(build_file(benign_chunks(1), 1, 48)), "ok 48");
}

TEST(DecodeBomb, DictionaryEntryRepeatedByRleIndices) {
  // 1000 rows whose proof is one 16 MiB dictionary entry: 16 GB once expanded.
  auto chunks = benign_chunks(1000);
  chunks[column_index("proof")] = repeated_value(plain(std::string(16 * kMiB, '\0')), 1000, 1);
  const std::string bytes = build_file(chunks, 1000, 1);
  EXPECT_LT(bytes.size(), 20000u);
  expect_budget_error(bytes, "decoded bytes", "column 'proof'");
}

TEST(DecodeBomb, OneZstdPageReferencedByManyRowGroups) {
  // One 60 MiB proof in a zstd page of a few KB, and 48 row groups that all point at it: 2.9 GB.
  auto chunks = benign_chunks(1);
  chunks[column_index("proof")] = single_plain(std::string(60 * kMiB, '\0'), 1);
  const std::string bytes = build_file(chunks, 1, 48);
  EXPECT_LT(bytes.size(), 60000u);
  expect_budget_error(bytes, "decoded bytes", "column 'proof'");
}

TEST(DecodeBomb, PageAboveThePageLimit) {
  // A 103 MB proof (a multiple of 258 bytes, so the row is otherwise valid) in one zstd page.
  auto chunks = benign_chunks(1);
  chunks[column_index("proof")] = single_plain(std::string(258 * 400000, '\0'), 1);
  const std::string bytes = build_file(chunks, 1, 1);
  EXPECT_LT(bytes.size(), 20000u);
  expect_budget_error(bytes, "max_page_bytes", "column 'proof'");
}

TEST(DecodeBomb, RowCountAboveTheRowLimit) {
  // 1,000,001 rows of RLE runs in under 3 KB.
  const std::string bytes = build_file(benign_chunks(1000001), 1000001, 1);
  EXPECT_LT(bytes.size(), 5000u);
  expect_budget_error(bytes, "max_rows");
}

TEST(DecodeBomb, RepetitionLevelRun) {
  // One row whose completion is 2^27 tokens: 1.5 GB of levels and values from a few bytes.
  auto chunks = benign_chunks(1);
  chunks[column_index("completion_tokens")] = one_long_list(int64_t{1} << 27, 5);
  const std::string bytes = build_file(chunks, 1, 1);
  EXPECT_LT(bytes.size(), 5000u);
  expect_budget_error(bytes, "decoded bytes", "column 'completion_tokens'");
}

TEST(DecodeBomb, FooterAboveTheFooterLimit) {
  // A 17 MiB key/value entry: the footer is refused before it is parsed.
  const std::string bytes =
      build_file(benign_chunks(1), 1, 1, {{"padding", std::string(17 * kMiB, 'x')}});
  expect_budget_error(bytes, "max_footer_bytes");
}

TEST(DecodeBomb, RowGroupsAboveTheRowGroupLimit) {
  // 10,001 one-row groups sharing the same chunks (about 5 MB of footer).
  const std::string bytes = build_file(benign_chunks(1), 1, 10001);
  expect_budget_error(bytes, "max_row_groups");
}

}  // namespace
}  // namespace trellis::rollout
