// The decode budget at its edges: an honest file decodes with every limit set to exactly what it
// needs and fails, naming the limit, one below; honest files fit the default budget with room to
// spare, including a highly compressible one.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "hostile_file.h"
#include "rollout/parquet/reader.h"
#include "rollout/rollout_test_util.h"

namespace trellis::rollout {
namespace {

using parquet::DecodeBudget;

// Whether `bytes` decodes within `budget`; the Error otherwise.
std::string decode_error(std::string_view bytes, const DecodeBudget& budget) {
  try {
    decode_rollout_file(bytes, "edge.parquet", budget);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Sets one limit to `at_edge` (the file decodes) and then one less (refused, naming `field`).
void expect_edge(std::string_view bytes, const char* field,
                 const std::function<void(DecodeBudget&, uint64_t)>& set, uint64_t at_edge) {
  SCOPED_TRACE(field);
  DecodeBudget budget;
  set(budget, at_edge);
  EXPECT_EQ(decode_error(bytes, budget), "");
  set(budget, at_edge - 1);
  const std::string e = decode_error(bytes, budget);
  EXPECT_NE(e.find(field), std::string::npos) << e;
  EXPECT_NE(e.find("edge.parquet"), std::string::npos) << e;
}

TEST(DecodeBudget, HonestFileAtEveryLimitsEdge) {
  const auto rows = test_data::sample_records(50);
  EncodeOptions options;
  options.rows_per_group = 7;  // 8 row groups, one page per column chunk
  const std::string bytes = encode_rollout_file(rows, {{"model", "m"}, {"k", "v"}}, {}, options);
  const parquet::Table table =
      parquet::read_table(bytes, parquet::rollout_columns(), "edge.parquet");
  const uint64_t decoded = table.decoded_bytes;
  ASSERT_GT(decoded, 0u);
  size_t prompt = 0, completion = 0;  // list values of the fullest list column
  for (const auto& r : rows) {
    prompt += r.prompt_tokens.size();
    completion += r.completion_tokens.size();
  }
  const size_t tokens = std::max(prompt, completion);

  expect_edge(
      bytes, "decoded_bytes",
      [](DecodeBudget& b, uint64_t v) {
        b.decoded_bytes_base = v;
        b.decoded_bytes_per_file_byte = 0;
      },
      decoded);
  expect_edge(
      bytes, "max_decoded_bytes", [](DecodeBudget& b, uint64_t v) { b.max_decoded_bytes = v; },
      decoded);
  expect_edge(
      bytes, "max_rows", [](DecodeBudget& b, uint64_t v) { b.max_rows = static_cast<int64_t>(v); },
      50);
  expect_edge(
      bytes, "max_row_groups", [](DecodeBudget& b, uint64_t v) { b.max_row_groups = v; }, 8);
  expect_edge(
      bytes, "max_column_chunks", [](DecodeBudget& b, uint64_t v) { b.max_column_chunks = v; },
      8 * 19);
  expect_edge(
      bytes, "max_pages", [](DecodeBudget& b, uint64_t v) { b.max_pages = v; }, 8 * 19);
  expect_edge(
      bytes, "max_key_values", [](DecodeBudget& b, uint64_t v) { b.max_key_values = v; }, 3);
  expect_edge(
      bytes, "max_list_values",
      [](DecodeBudget& b, uint64_t v) { b.max_list_values = static_cast<int64_t>(v); }, tokens);
  const parquet::Footer footer = parquet::read_footer(bytes, "t");
  expect_edge(
      bytes, "max_footer_bytes", [](DecodeBudget& b, uint64_t v) { b.max_footer_bytes = v; },
      bytes.size() - footer.body_size - 8);
  expect_edge(
      bytes, "max_chunk_list_elements",
      [](DecodeBudget& b, uint64_t v) { b.max_chunk_list_elements = v; },
      3);  // path_in_schema of a list column: name, list, element
}

TEST(DecodeBudget, DecodedBytesLimitFollowsTheFileSize) {
  DecodeBudget b;
  EXPECT_EQ(b.decoded_bytes_limit(0), b.decoded_bytes_base);
  EXPECT_EQ(b.decoded_bytes_limit(1000), b.decoded_bytes_base + 32000);
  EXPECT_EQ(b.decoded_bytes_limit(size_t{256} << 20), b.max_decoded_bytes);
  EXPECT_EQ(b.decoded_bytes_limit(~size_t{0}), b.max_decoded_bytes);  // no overflow
}

TEST(DecodeBudget, RealisticFileUsesAFractionOfItsBudget) {
  // Completions like real ones: token ids from a 150k vocabulary, varied log-probs, versions
  // that change rarely. The decode counts well under half of decoded_bytes_per_file_byte.
  std::mt19937 rng(11);
  std::vector<RolloutRecord> rows;
  for (int i = 0; i < 64; ++i) {
    RolloutRecord r = test_data::sample_record(i);
    r.prompt_tokens.resize(300);
    r.completion_tokens.resize(4000);
    r.completion_logprobs.resize(4000);
    r.token_versions.assign(4000, 3);
    for (auto& t : r.prompt_tokens) t = static_cast<int32_t>(rng() % 150000);
    for (auto& t : r.completion_tokens) t = static_cast<int32_t>(rng() % 150000);
    for (auto& lp : r.completion_logprobs) lp = -std::exponential_distribution<float>(2.0f)(rng);
    rows.push_back(r);
  }
  const std::string bytes = encode_rollout_file(rows, {});
  const uint64_t decoded =
      parquet::read_table(bytes, parquet::rollout_columns(), "real").decoded_bytes;
  const double per_byte = static_cast<double>(decoded) / static_cast<double>(bytes.size());
  EXPECT_LT(per_byte, DecodeBudget{}.decoded_bytes_per_file_byte / 2.0) << decoded;
  EXPECT_EQ(decode_rollout_file(bytes, "real").rows.size(), rows.size());
}

TEST(DecodeBudget, HighlyCompressibleHonestFileFitsTheDefaultBudget) {
  // 40 completions of 100k identical tokens with identical log-probs (a degenerate but honest
  // worker): a ~50 KB file that counts ~190 MB, over two thirds of the base. It decodes, in a
  // child whose address space may grow by 1 GiB.
  std::vector<RolloutRecord> rows;
  for (int i = 0; i < 40; ++i) {
    RolloutRecord r = test_data::sample_record(i);
    r.completion_tokens.assign(100000, 13);
    r.completion_logprobs.assign(100000, 0.0f);
    r.token_versions.assign(100000, 3);
    rows.push_back(r);
  }
  const std::string bytes = encode_rollout_file(rows, {});
  const uint64_t decoded =
      parquet::read_table(bytes, parquet::rollout_columns(), "degenerate").decoded_bytes;
  EXPECT_GT(decoded, DecodeBudget{}.decoded_bytes_limit(bytes.size()) * 2 / 3);
  EXPECT_EQ(hostile::decode_in_child(bytes), "ok 40");
}

}  // namespace
}  // namespace trellis::rollout
