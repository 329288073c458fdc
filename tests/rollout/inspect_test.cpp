// `trellis rollouts inspect` report: schema, row groups, metadata, statistics and rows of a file
// are all there and right; a bad file is an Error.
#include "rollout/inspect.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "rollout/rollout_file.h"
#include "rollout/rollout_test_util.h"

namespace trellis::rollout {
namespace {

void expect_contains(const std::string& text, const std::string& needle) {
  EXPECT_NE(text.find(needle), std::string::npos) << "missing: " << needle << "\n" << text;
}

TEST(Inspect, ReportsSchemaGroupsMetadataStatsAndRows) {
  std::vector<RolloutRecord> rows;
  for (int i = 0; i < 4; ++i) {
    RolloutRecord r = test_data::sample_record(i);
    r.reward = static_cast<float>(i);  // mean 1.5, min 0, max 3
    rows.push_back(r);
  }
  EncodeOptions options;
  options.rows_per_group = 3;
  const std::string bytes = encode_rollout_file(rows, {{"model", "tiny"}}, {}, options);
  const std::string text = inspect_rollout_file(bytes, "f.parquet", 2);
  expect_contains(text, "file: f.parquet");
  expect_contains(text, "rows: 4\n");
  expect_contains(text, "row groups: 2\n");
  expect_contains(text, "  0: 3 rows");
  expect_contains(text, "  1: 1 rows");
  expect_contains(text, "ZSTD");
  expect_contains(text, "run_id");
  expect_contains(text, "BYTE_ARRAY  STRING");
  expect_contains(text, "LIST<FLOAT>");
  expect_contains(text, "proof                BYTE_ARRAY  BINARY");
  expect_contains(text, "trellis.schema_version = 1");
  expect_contains(text, "model = tiny");
  expect_contains(text, "reward             mean 1.5  min 0  max 3");
  expect_contains(text, "finish reasons     eos 2, length 2");
  expect_contains(text, "steps              7..9 (3 distinct)");
  expect_contains(text, "first 2 of 4 rows:");
  EXPECT_EQ(text.find("task-2"), std::string::npos) << "row 2 is past --rows 2";
  expect_contains(text, "task-1");
}

TEST(Inspect, EmptyFileAndBadFile) {
  const std::string text = inspect_rollout_file(encode_rollout_file({}, {}), "e", 5);
  expect_contains(text, "rows: 0\n");
  expect_contains(text, "row groups: 0\n");
  EXPECT_THROW(inspect_rollout_file("not parquet at all", "bad", 5), Error);
}

}  // namespace
}  // namespace trellis::rollout
